"""The driver's last seconds: a Ctrl-C once the run's own handler is gone.

While the run trains, ``nexrl.driver.controller.signals`` owns Ctrl-C (the first stops at the
next safe point, a second at once). Around it, the command installs the handler here,
which the run's handler hands back to when it is removed: a Ctrl-C while the run's
processes close, while the last lines are printed, or while Python tears itself down
ends the process at once with the run's exit code (130 unless the run had already
ended otherwise), and with one line if the run had not yet printed its last one.

Without it, such a Ctrl-C raised ``KeyboardInterrupt`` in code that prints the outcome
(a wrong "before the run started" line), or, once Python had put SIGINT back to its
default in its own teardown, killed the driver by the signal: no line, and a caller
saw -2 instead of 130 (a CI run, and a hand test that pressed Ctrl-C again 2 s after
the first, hit it).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from typing import Any

__all__ = ["arm", "ended"]

_state: dict[str, Any] = {"armed": False, "code": 130, "line": "", "said": False}


def _at_once(_signum: int, _frame: Any) -> None:
    if not _state["said"]:
        with contextlib.suppress(OSError):  # os.write: print() may be mid-write right now
            os.write(2, f"{_state['line']}\n".encode())
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(int(_state["code"]))


def _ignore_in_python_teardown() -> None:
    """The last ``atexit`` callback: from here Python finalizes its modules, and then
    it would put SIGINT back to its default (death by the signal); ignored is kept."""
    if _state["armed"]:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, signal.SIG_IGN)


# registered as ``nexrl.driver.cli.train`` is imported, before the run imports Dask: so it
# runs after Dask's own callbacks (atexit runs the newest first)
atexit.register(_ignore_in_python_teardown)


def arm(line: str) -> None:
    """Install the at-once handler (the run's own handler takes over while it trains and
    gives it back after); ``line``: what it prints if the run has not said its last."""
    with contextlib.suppress(ValueError):  # not the main thread: Python's default stays
        signal.signal(signal.SIGINT, _at_once)
    _state.update(armed=True, code=130, line=line, said=False)


def ended(code: int) -> int:
    """The run printed its last line and exits with ``code``: a Ctrl-C from here exits
    with it, silently. Returns ``code``."""
    _state.update(code=code, said=True)
    return code
