"""``logs/driver.log``: where the driver's log records go besides the terminal, and
``DETAILS_LOGGER``, whose records go there only."""

from __future__ import annotations

import logging
from typing import Any

from nexrl.core.util.logfile import DETAILS_LOGGER, NO_ROTATION, LogRotation, close_log, open_log
from nexrl.driver.controller.rundir import RunDir

__all__ = ["DETAILS_LOGGER", "log_to_file"]


def log_to_file(run: RunDir, level: str, rotation: LogRotation = NO_ROTATION) -> Any:
    """Send log records to ``logs/driver.log`` (rotated by ``rotation``); returns the
    function that stops it."""
    handler = open_log(run.logs / "driver.log", rotation)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.getLogger("nexrl").setLevel(level)
    # DETAILS_LOGGER: records for this file only (the traceback of what stopped the run)
    details = logging.getLogger(DETAILS_LOGGER)
    details.addHandler(handler)
    details.propagate = False

    def stop() -> None:
        root.removeHandler(handler)
        details.removeHandler(handler)
        close_log(handler)

    return stop
