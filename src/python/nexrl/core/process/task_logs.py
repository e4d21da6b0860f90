"""Dask workers' error records (task tracebacks) go to a log file; the terminal gets
one line per distinct failure.

Dask sends its ``distributed.*`` loggers to a stream handler on stderr in every
process, and a worker's own warnings (an evaluator that raised) reach stderr
too: a task that fails on every sample (an evaluator class without
``evaluate()``) printed one multi-line ``Compute Failed`` record with its
traceback per task. ``route_logs(log_file, loggers)`` gives those loggers, in the
process it runs in,

* a file handler on ``log_file``: every record, traceback included;
* ``OneLinePerFailure`` on stderr instead of their stream handlers: a record
  below WARNING as before (shown if its logger printed it before, else only in
  the file: a worker's ``nexrl`` / ``backends`` INFO); a WARNING or ERROR one as one line
  (``distributed.worker - ERROR - Compute Failed evaluate-g3-r0: TypeError(...)``)
  the first time that kind of failure is seen, then the same line with its count
  at the 10th, 100th, 1000th... time (one line per kind and power of ten), and
  every record in the file.
  A kind is the logger, the message's template (``record.msg``, before its
  arguments: the data row an evaluator failed on) and the exception's type, not
  its text: an evaluator that raises ``ValueError`` on every model output (each
  message naming a different output) is one line, not one per distinct output.
  The line names the kind and says that the repeats are in the log file;
  ``repeats`` counts each kind.

The driver routes the scheduler's and client's records (``distributed``) into
``logs/driver.log``; ``install_task_logs(client, log_dir)`` registers
``RouteTaskLogs``, a Dask ``WorkerPlugin`` that routes ``distributed``, ``nexrl``
and ``backends`` in every worker, now and later, into
``logs/dask-worker-<name>.log``.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from distributed.diagnostics.plugin import WorkerPlugin

from nexrl.core.util.logfile import (
    NO_ROTATION,
    LogRotation,
    RepeatCounter,
    close_log,
    first_word,
    open_log,
)

__all__ = [
    "WORKER_LOGGERS",
    "OneLinePerFailure",
    "RouteTaskLogs",
    "install_task_logs",
    "route_logs",
]

WORKER_LOGGERS = ("distributed", "nexrl", "backends")
_EXCEPTION = re.compile(r"^Exception:\s*(.*)$", re.MULTILINE)
_KEY = re.compile(r"^Key:\s*(.*)$", re.MULTILINE)


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def one_line(record: logging.LogRecord) -> tuple[str, str]:
    """``(what, failure)`` of a record, each on one line: the message's first line (plus
    the task key of a Dask ``Compute Failed``) and the exception, if any."""
    message = record.getMessage()
    what = message.strip().splitlines()[0].strip() if message.strip() else record.levelname
    key = _KEY.search(message)
    if key:
        what = f"{what} {key.group(1).strip()}"
    found = _EXCEPTION.search(message)
    if found:
        failure = _unquote(found.group(1).strip())
    elif record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        failure = f"{type(exc).__name__}: {exc}"
    else:
        failure = ""
    return what, " ".join(failure.split())


#: what differs between two records of one kind: quoted names (task keys), addresses,
#: hex ids, numbers
_VARYING = re.compile(r"'[^']*'|0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b|\d+")


def failure_kind(record: logging.LogRecord, what: str, failure: str) -> tuple[str, ...]:
    """What makes two records "the same failure" (module doc): the logger, the message
    template's first line (the first word of a Dask ``Compute Failed`` line: its task
    key differs per task) and the exception's type."""
    template = record.msg if isinstance(record.msg, str) else what
    first = template.strip().splitlines()[0] if template.strip() else what
    if _KEY.search(record.getMessage()) or not isinstance(record.msg, str):
        first = what.split(" ", 1)[0]
    # a message formatted before logging (an f-string) names its task, its object's
    # address: "Async instruction for <Task ... execute('evaluate-g152+3-train-30a08cc3')
    # ... at 0x7f..> ended with CancelledError" is one kind, whatever the key
    first = _VARYING.sub("#", first)
    if not failure:
        return (record.name, first)
    return (record.name, first, first_word(failure) or failure)


class OneLinePerFailure(logging.StreamHandler[TextIO]):
    """Writes records of WARNING and above as one line, once per distinct failure (see
    the module doc); ``repeats`` counts each kind. ``where`` names the log file
    that has every record in full."""

    def __init__(self, stream: TextIO, where: str, shown_below_warning: Sequence[str] = ()) -> None:
        super().__init__(stream)
        self.shown_below_warning = tuple(shown_below_warning)  # loggers whose INFO was shown
        self.repeats = RepeatCounter(where)
        self.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "said_by_the_driver", False):  # (logfile.SAID_BY_THE_DRIVER)
            return
        if record.levelno < logging.WARNING:
            name = record.name
            if any(name == n or name.startswith(f"{n}.") for n in self.shown_below_warning):
                super().emit(record)  # as before (a logger that printed it already)
            return
        what, failure = one_line(record)
        note = self.repeats.note(failure_kind(record, what, failure))
        if note is None:
            return
        if failure in what:  # (also ""): the message already names the exception
            failure = ""
        line = f"{record.name} - {record.levelname} - {what}" + (f": {failure}" if failure else "")
        try:
            self.stream.write(f"{line} ({note})\n")
            self.flush()
        except Exception:
            self.handleError(record)


def _stream_handlers(logger: logging.Logger) -> list[logging.Handler]:
    return [
        h
        for h in logger.handlers
        if type(h) is logging.StreamHandler
        and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    ]


def route_logs(
    log_file: str | Path,
    loggers: Sequence[str] = ("distributed",),
    *,
    shown_as: str | None = None,
    rotation: LogRotation = NO_ROTATION,
) -> Callable[..., None]:
    """Route ``loggers`` (and their descendants that have handlers of their own) in this
    process as the module doc says; returns the function that undoes it, or with
    ``to_file_only=True`` leaves only the file (records of a process that is closing)."""
    log_file = Path(log_file)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # a full disk: one line, no tracebacks; rotated, through the file's one handler
    file_handler = open_log(log_file, rotation)
    names = [
        n
        for n in (*loggers, *sorted(logging.Logger.manager.loggerDict))
        if n in loggers or any(n.startswith(f"{top}.") for top in loggers)
    ]
    printed = [n for n in dict.fromkeys(names) if _stream_handlers(logging.getLogger(n))]
    terminal = OneLinePerFailure(sys.stderr, shown_as or str(log_file), printed)
    changed: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for name in dict.fromkeys(names):
        logger = logging.getLogger(name)
        streams = _stream_handlers(logger)
        if not streams and name not in loggers:
            continue  # a descendant without handlers: its records reach the top one
        changed.append((logger, streams, logger.propagate))
        for h in streams:
            logger.removeHandler(h)
        logger.addHandler(file_handler)
        logger.addHandler(terminal)
        logger.propagate = False

    def undo(to_file_only: bool = False) -> None:
        for logger, streams, propagate in changed:
            logger.removeHandler(terminal)
            if to_file_only:
                continue
            logger.removeHandler(file_handler)
            for h in streams:
                logger.addHandler(h)
            logger.propagate = propagate
        if to_file_only:
            file_handler.flush()
        else:
            close_log(file_handler)

    return undo


class RouteTaskLogs(WorkerPlugin):
    """Routes ``WORKER_LOGGERS`` of a worker's process into
    ``<log_dir>/dask-worker-<name>.log`` (named ``<shown_dir>/...`` on the terminal)."""

    name = "nexrl-task-logs"

    def __init__(
        self, log_dir: str | Path, shown_dir: str = "logs", rotation: LogRotation = NO_ROTATION
    ) -> None:
        self.log_dir = str(log_dir)
        self.shown_dir = shown_dir
        self.rotation = rotation
        self._undo: Callable[..., None] | None = None

    def setup(self, worker: Any) -> None:
        name = re.sub(r"[^\w.-]", "_", str(worker.name))
        file = f"dask-worker-{name}.log"
        logging.getLogger("backends").setLevel(logging.INFO)  # e.g. what DeepSpeed printed
        self._undo = route_logs(
            Path(self.log_dir) / file,
            WORKER_LOGGERS,
            shown_as=f"{self.shown_dir}/{file}",
            rotation=self.rotation,
        )

    def teardown(self, worker: Any) -> None:
        # The worker is closing, and its tasks may still log (a rollout whose server
        # has gone): to the file only. Undone in full, a warning with its traceback
        # would reach the terminal through Python's last-resort handler.
        if self._undo is not None:
            self._undo(to_file_only=True)
            self._undo = None


def install_task_logs(
    client: Any, log_dir: str | Path, rotation: LogRotation = NO_ROTATION
) -> None:
    """Route the logs of every worker of ``client``'s cluster, now and later, into
    ``log_dir`` (register right after the client connects), rotated by ``rotation``."""
    client.register_plugin(RouteTaskLogs(log_dir, rotation=rotation))
