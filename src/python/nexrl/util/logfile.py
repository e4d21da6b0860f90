"""``QuietFileHandler``: a log file that a full disk cannot turn into tracebacks.

``logging.FileHandler`` prints ``--- Logging error ---`` and a traceback (with the
whole call stack) on stderr for every record it fails to write, and raises from
``close``. When the disk fills, every process of a run (the driver, each Dask
worker) would print dozens of them while the run stops. This handler prints one
``warning: cannot write <file>: <error>`` line instead, the first time, drops the
records it cannot write, and closes without raising.
"""

from __future__ import annotations

import contextlib
import logging
import sys

__all__ = ["QuietFileHandler"]


class QuietFileHandler(logging.FileHandler):
    """A ``logging.FileHandler`` that reports a failed write once, in one line."""

    _warned = False

    def handleError(self, record: logging.LogRecord) -> None:
        if self._warned:
            return
        self._warned = True
        exc = sys.exc_info()[1]
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"warning: cannot write {self.baseFilename}: {exc} (later records are dropped "
                "while this lasts)\n"
            )

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:
            self.handleError(None)  # type: ignore[arg-type]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            super().close()
        # a failed close leaves the stream set: drop it so nothing writes to it again
        self.stream = None
