"""The stop signal's line is written off the signal handler: a handler that wrote to
stderr while the main thread was inside a write to it raised "reentrant call inside
<_io.BufferedWriter name='<stderr>'>" and the driver died (CI, Ctrl-C mashed)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

from nexrl.driver.controller.signals import StopSignals


class _Threads(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((threading.current_thread().name, record.getMessage()))


@contextlib.contextmanager
def _installed() -> Iterator[tuple[StopSignals, _Threads]]:
    """``StopSignals`` installed, the controller's log lines recorded with their thread."""
    handler = _Threads()
    log = logging.getLogger("nexrl.driver.controller.loop")
    log.addHandler(handler)
    signals = StopSignals()
    signals.install()
    try:
        yield signals, handler
    finally:
        signals.restore()
        log.removeHandler(handler)


def test_the_stop_line_is_logged_from_another_thread_and_the_reason_kept() -> None:
    with _installed() as (signals, handler):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not handler.seen and time.monotonic() < deadline:
            time.sleep(0.01)
    assert signals.reason == "SIGTERM"
    assert handler.seen == [
        ("nexrl-stop-signal", "SIGTERM: stopping at the next safe point (checkpoint, then exit)")
    ]


def test_a_sigint_delivered_twice_is_one_stop_and_a_later_one_stops_at_once() -> None:
    """A signal to the command's process group reaches ./pants (which passes it on) and
    Pants: the run gets it twice within milliseconds. That is one stop (checkpoint,
    then exit); a Ctrl-C pressed again after DUPLICATE_S stops at once."""
    import pytest

    from nexrl.driver.controller.signals import DUPLICATE_S

    with _installed() as (signals, handler):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the same stop, delivered twice
        time.sleep(0.05)
        assert signals.reason == "SIGINT"
        time.sleep(DUPLICATE_S)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # pressed again: stop now
            time.sleep(1)
    stops = [m for _, m in handler.seen if "stopping at the next safe point" in m]
    assert stops == ["SIGINT: stopping at the next safe point (checkpoint, then exit)"]
