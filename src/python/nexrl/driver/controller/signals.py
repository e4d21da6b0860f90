"""Ctrl-C (SIGINT) or SIGTERM: the run stops at the next safe point (checkpoint, then
exit); a second Ctrl-C stops it at once. A SIGINT that comes within ``DUPLICATE_S`` of
the first is the same stop delivered twice, not a second press: a signal sent to a
command's whole process group reaches both ``./pants`` (which passes it on) and Pants,
and Pants passes each on to the run."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from typing import Any

__all__ = ["StopSignals"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name
DUPLICATE_S = 0.5  # a second SIGINT sooner than this after the first is the same one


class StopSignals:
    """``reason``: the signal's name once one arrived (None before)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}
        self._first_at = 0.0

    def install(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.reason is not None:
                if signum == signal.SIGINT and time.monotonic() - self._first_at >= DUPLICATE_S:
                    raise KeyboardInterrupt  # a second Ctrl-C: stop now
                return  # the same stop again (another signal, or one delivered twice)
            self.reason, self._first_at = name, time.monotonic()
            # Logged from another thread: the handler runs between two bytecodes of the
            # main thread, which may be inside a write to stderr (a progress line); a
            # write from here raised "reentrant call inside <_io.BufferedWriter
            # name='<stderr>'>" and the driver died of it (seen in CI, Ctrl-C mashed).
            threading.Thread(
                target=logger.warning,
                args=("%s: stopping at the next safe point (checkpoint, then exit)", name),
                name="nexrl-stop-signal",
                daemon=True,
            ).start()

        previous: dict[int, Any] = {}
        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handler)
        self._previous = previous

    def restore(self) -> None:
        for sig, h in self._previous.items():
            signal.signal(sig, h)
