"""Log rotation (``logger.log_file_max_mb``, ``logger.log_file_backups``): the driver's
log, written by its own records and Dask's through one handler, rotated by size with
the backups kept and the oldest deleted; a log another process appends to (the
inference server's stdout) rotated by copy and truncate while that process writes."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

from nexrl.core.process.task_logs import route_logs
from nexrl.core.util.logfile import LogRotation, rotate_copytruncate
from nexrl.driver.controller.driver_log import log_to_file
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.recipe import load_recipe_checked

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_the_driver_log_rotates_through_one_handler_and_keeps_its_backups(tmp_path: Path) -> None:
    cfg = load_recipe_checked(
        RECIPE, ["logger.log_file_max_mb=0.001", "logger.log_file_backups=2"]
    ).spec
    rotation = LogRotation.from_config(cfg.logger)
    assert rotation == LogRotation(max_bytes=1048, backups=2)  # 0.001 MiB, rounded down
    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    stop_driver = log_to_file(run, "INFO", rotation)
    undo_dask = route_logs(run.logs / "driver.log", ("test_rotation_dask",), rotation=rotation)
    ours, dask = logging.getLogger("nexrl.test_rotation"), logging.getLogger("test_rotation_dask")
    dask.setLevel(logging.INFO)
    # what Dask's LocalCluster(silence_logs=...) does to the handlers on its loggers:
    # it must not silence the driver's own records in the same file
    for handler in dask.handlers:
        handler.setLevel(logging.CRITICAL)
    try:
        for i in range(120):  # ~70 bytes a record, every other one silenced
            (ours if i % 2 else dask).info("record %03d %s", i, "x" * 10)
    finally:
        undo_dask()
        stop_driver()
    logs = sorted(p.name for p in run.logs.iterdir())
    assert logs == ["driver.log", "driver.log.1", "driver.log.2"]  # .3 was deleted
    for name in logs:
        assert (run.logs / name).stat().st_size <= 1048
    # the newest records, in order, across .2, .1 and the live file: nothing lost in
    # what is kept, and one file (two handlers would each rotate it and interleave)
    kept = [
        int(line.split("record ")[1][:3])
        for name in ("driver.log.2", "driver.log.1", "driver.log")
        for line in _lines(run.logs / name)
    ]
    assert kept == list(range(119 - 2 * (len(kept) - 1), 120, 2)) and 30 < len(kept) < 60


def test_never_rotated_when_the_size_is_0(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    stop = log_to_file(run, "INFO", LogRotation(max_bytes=0))
    try:
        for i in range(200):
            logging.getLogger("nexrl.test_rotation").info("record %03d %s", i, "x" * 10)
    finally:
        stop()
    assert [p.name for p in run.logs.iterdir()] == ["driver.log"]
    assert len(_lines(run.logs / "driver.log")) == 200


WRITER = """
import sys, time
with open(sys.argv[1], "ab", buffering=0) as log:  # as the server's stdout is opened
    for i in range(400):
        log.write(b"line %04d\\n" % i)
        time.sleep(0.002)
"""


def test_a_log_another_process_appends_to_is_copied_and_truncated(tmp_path: Path) -> None:
    log = tmp_path / "inference.log"
    rotation = LogRotation(max_bytes=1000, backups=2)
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(log)])
    rotated = 0
    while child.poll() is None:
        rotated += rotate_copytruncate(log, rotation)
        time.sleep(0.05)
    rotated += rotate_copytruncate(log, rotation)
    assert child.returncode == 0 and rotated >= 3  # 400 lines x 10 bytes: 4 KB
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["inference.log", "inference.log.1", "inference.log.2"]
    for name in names:
        text = (tmp_path / name).read_bytes()
        assert b"\x00" not in text  # the writer went on at the new end, no hole
    kept = [
        int(line.split()[1])
        for name in ("inference.log.2", "inference.log.1", "inference.log")
        for line in _lines(tmp_path / name)
    ]
    assert kept == sorted(set(kept)) and kept[-1] == 399  # in order, the newest kept
    assert not rotate_copytruncate(log, LogRotation(max_bytes=0))  # 0: never
