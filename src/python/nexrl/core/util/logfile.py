"""Log files of a run: quiet when the disk is full, rotated by size, one per path.

* **Quiet.** ``logging.FileHandler`` prints ``--- Logging error ---`` and a traceback
  (with the whole call stack) on stderr for every record it fails to write, and
  raises from ``close``. When the disk fills, every process of a run (the driver,
  each Dask worker) would print dozens of them while the run stops.
  ``QuietFileHandler`` prints one ``warning: cannot write <file>: <error>`` line
  instead, the first time, drops the records it cannot write, and closes without
  raising.
* **Rotated.** A run that lasts a week must not fill its disk with logs
  (``logger.log_file_max_mb``, ``logger.log_file_backups``): past the size,
  ``driver.log`` becomes ``driver.log.1`` (``.1`` becomes ``.2``, ...; the oldest
  beyond the backups is deleted), as ``logging.handlers.RotatingFileHandler`` does.
  A file another process writes (the inference server's stdout) is rotated by
  ``rotate_copytruncate``: copied to ``.1``, then emptied in place (the writer opened
  it for appending, so it goes on at the new end; a line written between the copy
  and the truncation is lost, as with logrotate's ``copytruncate``).
* **One per path.** ``open_log(path)`` gives every caller in a process its own
  handler (its own level: ``LogFileUser``) writing through the file's one
  ``QuietFileHandler`` (the driver's own records and Dask's both go to
  ``driver.log``): two file handlers on one file would each rotate it, and one would
  go on writing into the other's ``.1``. ``close_log`` closes the file when its last
  user is done.
* **No tracebacks on the terminal.** ``TerminalFormatter`` writes a record that
  carries a traceback (a library's "Exception in callback", logged with
  ``exc_info``) as one line naming the exception and the log file that has the
  traceback.
* **One line per kind of repeat on the terminal.** ``FoldRepeats`` lets through the
  first record of a kind (a rollout that failed with a ``KeyError``, its retry) and
  then its 10th, 100th, ...: a worker bug that fails every group printed two lines
  per group and try, some 50 before the run stopped. The log file has each one.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nexrl.core.config.sections.runtime import LoggerConfig

__all__ = [
    "DETAILS_LOGGER",
    "FORMAT",
    "NO_ROTATION",
    "SAID_BY_THE_DRIVER",
    "FoldRepeats",
    "LogFileUser",
    "LogRotation",
    "QuietFileHandler",
    "RepeatCounter",
    "TerminalFormatter",
    "close_log",
    "open_log",
    "rotate_copytruncate",
]

DETAILS_LOGGER = "nexrl.details"  # the driver sends it to logs/driver.log only, never the terminal
#: ``logger.warning(..., extra=SAID_BY_THE_DRIVER)``: a worker's record that the driver
#: also shows (a resume's note): the worker's log file has it, its terminal line not
SAID_BY_THE_DRIVER = {"said_by_the_driver": True}


def joined_lines(text: str) -> str:
    """``text`` on one line: its non-blank lines, stripped, joined with " | "."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


class TerminalFormatter(logging.Formatter):
    """Formats as ``logging.Formatter`` does, but a record's traceback or stack is not
    written: ``<message>: <ExceptionType>: <its text, on one line> (traceback: <where>)``
    instead, ``where`` being the log file whose handler writes it in full."""

    def __init__(self, fmt: str, where: str) -> None:
        super().__init__(fmt)
        self.where = where

    def format(self, record: logging.LogRecord) -> str:
        note = getattr(record, "fold_note", None)  # set by FoldRepeats
        line = self._one_line(record)
        return f"{line} ({note})" if note else line

    def _one_line(self, record: logging.LogRecord) -> str:
        if not (record.exc_info or record.stack_info):
            return super().format(record)
        bare = logging.makeLogRecord(record.__dict__)  # the file handler keeps the original
        bare.exc_info, bare.exc_text, bare.stack_info = None, None, None
        line = super().format(bare)
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            text = joined_lines(str(exc))
            line += f": {type(exc).__name__}" + (f": {text}" if text else "")
        return f"{line} (traceback: {self.where})"


def power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the counts at which a folded repeat is shown again."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class RepeatCounter:
    """Counts records by kind, for a terminal that shows each kind once, then at its
    10th, 100th, ... (the driver's ``FoldRepeats``, a worker's ``OneLinePerFailure``)."""

    def __init__(self, where: str) -> None:
        self.where = where  # the log file that has every record
        self.counts: dict[tuple[str, ...], int] = {}

    def note(self, kind: tuple[str, ...]) -> str | None:
        """The note for this record of ``kind`` when it is to be shown, else None."""
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        if n > 1 and not power_of_ten(n):
            return None
        said = (
            "shown once per kind, then counted at 10, 100, ...;"
            if n == 1
            else f"the same kind {n} times so far in this process;"
        )
        return f"{said} details and repeats: {self.where}"


_FIRST_WORD = re.compile(r"^([A-Za-z_][\w.]*)")


def first_word(text: str) -> str | None:
    """The leading identifier of ``text`` (``KeyError`` of ``KeyError: 'x'``), or None."""
    found = _FIRST_WORD.match(text)
    return found.group(1) if found else None


class FoldRepeats(logging.Filter):
    """A terminal handler's filter: WARNING records of ``loggers`` are let through
    once per kind, then at the 10th, 100th, ... of that kind, each with a note
    (``fold_note``, which ``TerminalFormatter`` appends) saying so and naming
    ``where``, the log file that has them all. A kind: the logger, the message's
    template and the first word of its last argument when that is text (the
    exception type of a ``"...: %s"`` error, e.g. ``KeyError``)."""

    def __init__(self, loggers: tuple[str, ...], where: str) -> None:
        super().__init__()
        self.loggers = loggers
        self.repeats = RepeatCounter(where)

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if record.levelno < logging.WARNING or not any(
            name == n or name.startswith(f"{n}.") for n in self.loggers
        ):
            return True
        last = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        kind = (name, str(record.msg), (first_word(last) if isinstance(last, str) else None) or "")
        note = self.repeats.note(kind)
        if note is None:
            return False
        record.fold_note = note  # an attribute of its own: the log file's formatter omits it
        return True


@dataclass(frozen=True)
class LogRotation:
    """``max_bytes``: rotate a log file past this size (0: never); ``backups``: how
    many rotated files to keep (``.1`` newest)."""

    max_bytes: int = 0
    backups: int = 3

    @classmethod
    def from_config(cls, logger_cfg: LoggerConfig) -> LogRotation:
        """From the recipe's ``logger`` section (``log_file_max_mb``, ``log_file_backups``)."""
        return cls(int(logger_cfg.log_file_max_mb * 1024 * 1024), logger_cfg.log_file_backups)


NO_ROTATION = LogRotation()  # never rotated (max_bytes 0)


class QuietFileHandler(logging.handlers.RotatingFileHandler):
    """A size-rotated log file that reports a failed write once, in one line."""

    _warned = False

    def __init__(self, filename: str | os.PathLike[str], rotation: LogRotation = NO_ROTATION):
        super().__init__(
            filename, mode="a", maxBytes=rotation.max_bytes, backupCount=rotation.backups
        )

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


FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # every log file's lines

_lock = threading.Lock()
_open: dict[str, tuple[QuietFileHandler, int]] = {}  # path -> (the file's handler, users)


class LogFileUser(logging.Handler):
    """One user's handler on a log file shared in this process: its own level and
    filters (Dask's ``silence_logs`` sets the level of the handlers on ``distributed``,
    which must not silence the driver's own records); every record it lets through is
    written, and the file rotated, by the file's one ``QuietFileHandler``."""

    def __init__(self, target: QuietFileHandler) -> None:
        super().__init__()
        self.target = target
        self.baseFilename = target.baseFilename

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)

    def flush(self) -> None:
        self.target.flush()


def open_log(path: str | os.PathLike[str], rotation: LogRotation = NO_ROTATION) -> LogFileUser:
    """A handler writing to ``path`` through the file's one handler in this process
    (opened with the first caller's ``rotation``); give it back with ``close_log``."""
    key = str(Path(path).resolve())
    with _lock:
        target, users = _open.get(key, (None, 0))
        if target is None:
            target = QuietFileHandler(key, rotation)
            target.setFormatter(logging.Formatter(FORMAT))
        _open[key] = (target, users + 1)
    return LogFileUser(target)


def close_log(user: LogFileUser) -> None:
    """``user`` done with its file; the last user of the file closes it."""
    target = user.target
    with _lock:
        held = _open.get(target.baseFilename)
        last = held is None or held[0] is not target or held[1] <= 1
        if held is not None and held[0] is target:
            if last:
                del _open[target.baseFilename]
            else:
                _open[target.baseFilename] = (target, held[1] - 1)
    user.close()
    if last:
        target.close()


def rotate_copytruncate(path: str | os.PathLike[str], rotation: LogRotation) -> bool:
    """Rotate ``path`` (written by another process, opened for appending) when it is past
    ``rotation.max_bytes``: ``.1``... shifted, ``path`` copied to ``.1`` and emptied in
    place. Returns True when it rotated; never raises (a log is not worth a run)."""
    if rotation.max_bytes <= 0:
        return False
    path = Path(path)
    try:
        if path.stat().st_size <= rotation.max_bytes:
            return False
        if rotation.backups <= 0:
            os.truncate(path, 0)
            return True
        for i in range(rotation.backups - 1, 0, -1):
            older = path.with_name(f"{path.name}.{i}")
            if older.exists():
                os.replace(older, path.with_name(f"{path.name}.{i + 1}"))
        shutil.copyfile(path, path.with_name(f"{path.name}.1"))
        os.truncate(path, 0)
        return True
    except OSError:
        return False
