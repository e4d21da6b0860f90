"""A server that failed to start, in one line: the first line of the error and the
last error its own log shows (``InferenceSupervisor``'s start and restart)."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["log_since", "start_failure"]

LOG_SCAN_BYTES = 64 * 1024  # how far back a failed start's log is searched for its error
_ERROR_LINE = re.compile(r"\b([\w.]*(?:Error|Exception): \S.*)$")


def log_since(log: Path, since: int) -> str:
    """What ``log`` holds past byte ``since``: at most its last ``LOG_SCAN_BYTES``."""
    try:
        with open(log, "rb") as f:
            f.seek(max(since, f.seek(0, os.SEEK_END) - LOG_SCAN_BYTES))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def start_failure(exc: BaseException, log: Path, since: int = 0) -> str:
    """A start failure in one line: the first line of ``exc`` and the last error the
    server's ``log`` shows past byte ``since`` (where this start began writing; at most
    its last ``LOG_SCAN_BYTES``). ``logs/driver.log`` gets ``exc`` in full, with the
    log's tail. An error that points at a "root cause above" (vLLM's engine start-up)
    is passed over for the one before it."""
    first = str(exc).partition("\n")[0]
    lines = log_since(log, since).splitlines()
    errors = []
    for i, line in enumerate(lines):
        if m := _ERROR_LINE.search(line):
            error = m.group(1).strip()
            after = lines[i + 1] if i + 1 < len(lines) else ""
            if after[:1].isspace() and not after.strip().startswith(('File "', "^")):
                error = f"{error}: {after.strip()}"  # e.g. pydantic's "1 validation error" + why
            errors.append(error)
    errors = [e for e in errors if "root cause" not in e.lower()] or errors
    last = errors[-1] if errors else ""
    if len(last) > 300:
        last = last[:300] + "..."
    return f"{first.rstrip(':')}; its last error: {last}" if last else first.rstrip(":")
