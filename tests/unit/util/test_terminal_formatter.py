"""``TerminalFormatter``, as the driver's terminal handler uses it: a library's record
with a traceback (here tornado's "Exception in callback", from a coroutine that raised
in its IOLoop, as Dask's actor calls do when a worker is lost) is one line on the
terminal naming the exception and the log file; the log file has the traceback."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import pytest
from tornado.ioloop import IOLoop  # pants: no-infer-dep (Dask's, see BUILD)

from nexrl.core.util.logfile import TerminalFormatter

FMT = "%(levelname)s %(name)s: %(message)s"


def _callback_that_raises() -> None:
    async def lost_actor() -> None:
        raise Exception("KeyError('nexrl-trainer-rank0')\nsecond line")

    async def main() -> None:
        IOLoop.current().add_callback(lost_actor)
        await asyncio.sleep(0.05)

    asyncio.run(main())


@pytest.mark.parametrize("file_first", [True, False], ids=["file-first", "terminal-first"])
def test_a_callback_traceback_is_one_terminal_line_and_whole_in_the_file(
    tmp_path: Path, file_first: bool
) -> None:
    log_file = tmp_path / "driver.log"
    terminal = io.StringIO()
    to_terminal = logging.StreamHandler(terminal)
    to_terminal.setFormatter(TerminalFormatter(FMT, where=str(log_file)))
    to_file = logging.FileHandler(log_file)
    to_file.setFormatter(logging.Formatter(FMT))
    root = logging.getLogger()
    handlers: list[logging.Handler] = (
        [to_file, to_terminal] if file_first else [to_terminal, to_file]
    )
    for h in handlers:
        root.addHandler(h)
    try:
        _callback_that_raises()
    finally:
        for h in handlers:
            root.removeHandler(h)
        to_file.close()
    lines = terminal.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR tornado.application: Exception in callback"), lines[0]
    assert lines[0].endswith(
        f": Exception: KeyError('nexrl-trainer-rank0') | second line (traceback: {log_file})"
    ), lines[0]
    written = log_file.read_text()
    assert "Traceback (most recent call last)" in written and "lost_actor" in written


def test_a_record_without_a_traceback_is_formatted_as_before() -> None:
    record = logging.LogRecord("nexrl.x", logging.WARNING, __file__, 1, "disk %s", ("low",), None)
    assert TerminalFormatter(FMT, where="driver.log").format(record) == "WARNING nexrl.x: disk low"
