"""``QuietFileHandler`` on a device that is always full (``/dev/full``: every write
fails with ENOSPC): one warning line, no traceback, and closing does not raise."""

from __future__ import annotations

import logging
import os

import pytest

from nexrl.core.util.logfile import QuietFileHandler

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def test_a_full_disk_gives_one_warning_line_and_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    handler = QuietFileHandler("/dev/full")
    log = logging.getLogger("test_logfile.full")
    log.addHandler(handler)
    log.propagate = False
    try:
        for i in range(5):
            log.warning("record %d", i)
    finally:
        log.removeHandler(handler)
        handler.close()  # flushes into the full device: must not raise
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "warning: cannot write /dev/full: [Errno 28] No space left on device (later records "
        "are dropped while this lasts)"
    ]
    assert "Traceback" not in err and "Logging error" not in err


def test_a_plain_file_handler_would_print_tracebacks(capsys: pytest.CaptureFixture[str]) -> None:
    # what the handler replaces: logging's default prints a traceback per failed record
    handler = logging.FileHandler("/dev/full")
    log = logging.getLogger("test_logfile.plain")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("one")
        log.warning("two")
    finally:
        log.removeHandler(handler)
        with pytest.raises(OSError):
            handler.close()
    assert capsys.readouterr().err.count("--- Logging error ---") == 2
