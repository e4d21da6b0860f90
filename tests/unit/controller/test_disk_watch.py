"""``DiskWatch`` on a real file system filling up (a 16 MiB tmpfs the test mounts): the
warning hours before (once an hour at most, with the rate per step and the steps
left), the stop below the floor, and the floor capped at 5 % of a small disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nexrl.driver.controller.disk_watch import DiskWatch
from tests._tmpfs import mounted_tmpfs

MIB = 1 << 20
CHUNK = 768 << 10


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    with mounted_tmpfs("16M", "nexrl-disk-watch-") as mnt:
        (mnt / "run").mkdir()
        yield mnt


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_it_warns_with_the_rate_then_stops_below_the_floor(tmpfs: Path) -> None:
    run, clock = tmpfs / "run", Clock()
    watch = DiskWatch(
        [run, run / "checkpoints", tmpfs / "elsewhere"],
        min_free_gb=1.0,
        warn_hours=6.0,
        clock=clock,
    )
    folder, free, floor = watch.fullest() or (None, 0, 0)
    assert folder == run and floor == int(16 * MIB * 0.05)  # 1 GiB capped at 5 % of 16 MiB
    assert watch.observe(1) == (None, None)  # one reading: no rate yet
    lines = []
    step = 1
    while True:  # each step writes 768 KiB and takes a minute
        step += 1
        clock.now += 60
        (run / f"step_{step}").write_bytes(b"\0" * CHUNK)
        warning, stop = watch.observe(step)
        if warning:
            lines.append((step, warning))
        if stop:
            break
    # the first step with a rate warns: ~15 MiB left at 768 KiB a minute is < 6 h
    (first, text), *more = lines
    assert first == 2 and more == []  # and not again within the hour
    left = (free - CHUNK - floor) // CHUNK
    hours = (free - CHUNK - floor) / CHUNK * 60 / 3600
    assert text.startswith("disk filling: ") and f" free on {run}, ~768.0 KiB used per step" in text
    assert f"in ~{hours:.1f} h (~{left} steps) at this rate" in text
    assert "trainer.keep_checkpoints" in text
    assert step == 1 + (free - floor) // CHUNK + 1  # the first step below the floor
    assert stop.startswith("disk nearly full: ") and f"free on {run}, below" in stop
    assert (
        f"runtime_monitor.min_free_disk_gb (here 819.2 KiB); the run stopped after step {step}"
        in stop
    )


def test_a_run_that_ends_before_the_floor_is_not_warned(tmpfs: Path) -> None:
    """~15 MiB left at 768 KiB a step reaches the floor in ~18 steps: a run with 5 steps
    to go is not warned (its own writes end first), one with 40 to go is."""
    run, clock = tmpfs / "run", Clock()
    short = DiskWatch([run], min_free_gb=1.0, warn_hours=6.0, clock=clock)
    long = DiskWatch([run], min_free_gb=1.0, warn_hours=6.0, clock=clock)
    said: dict[str, list[int]] = {"short": [], "long": []}
    for step in range(1, 4):
        clock.now += 60
        (run / f"step_{step}").write_bytes(b"\0" * CHUNK)
        if short.observe(step, steps_to_go=5)[0]:
            said["short"].append(step)
        if long.observe(step, steps_to_go=40)[0]:
            said["long"].append(step)
    assert said == {"short": [], "long": [2]}


def test_no_floor_no_check(tmpfs: Path) -> None:
    (tmpfs / "run" / "fill").write_bytes(b"\0" * (16 * MIB - 64 * 1024))
    watch = DiskWatch([tmpfs / "run"], min_free_gb=0.0, warn_hours=6.0)
    assert watch.observe(1) == (None, None)
    assert DiskWatch([tmpfs / "run"], min_free_gb=1.0, warn_hours=6.0).observe(1)[1]
