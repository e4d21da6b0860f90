"""``DiskWatch``: a run that is filling its disk says so hours before, and stops
cleanly (resumable, nothing lost) before a write fails.

After every step the watch reads the free space of each file system the run writes
to (the run folder, checkpoints, snapshots, a local pool: ``statvfs``, microseconds)
and keeps the last ``WINDOW`` readings of the fullest one. From them:

* **rate**: bytes used per second over the window (the run's own writes and
  anything else on that disk);
* **warning** (at most once an hour): when at that rate the free space reaches the
  floor in under ``runtime_monitor.disk_warn_hours`` and before the run's last step
  (a run that ends first at that rate is not warned), a line naming the folder, the
  free space, the rate per step and the hours left, and the settings that bound the
  run's own files;
* **stop**: when the free space is below the floor, the run stops after the step
  (its row logged) with one line naming the folder and how to resume. The floor is
  ``runtime_monitor.min_free_disk_gb``, but at most 5 % of that file system (a
  small disk is not refused outright).

A write that fails anyway (a disk filled faster than a step) is still the
``no space left on device`` stop of ``StopDiagnosis.disk_full``.
"""

from __future__ import annotations

import collections
import logging
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from nexrl.core.util.disk import human_bytes

__all__ = ["DiskWatch"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name

WINDOW = 50  # steps the rate is measured over
WARN_EVERY_S = 3600.0
FLOOR_SHARE = 0.05  # the floor is at most this share of the file system's size

BOUNDS = (
    "trainer.keep_checkpoints, weight.keep_snapshots and logger.log_file_max_mb bound "
    "the run's own files; the pool grows with every trajectory"
)


def _usage(folder: Path) -> tuple[int, int] | None:
    """(free, total) bytes of the file system holding ``folder`` or its nearest parent."""
    for candidate in (folder, *folder.parents):
        try:
            u = shutil.disk_usage(candidate)
        except OSError:
            continue
        return int(u.free), int(u.total)
    return None


class DiskWatch:
    """Free space of the folders a run writes (module doc); ``observe`` after a step."""

    def __init__(
        self,
        folders: Iterable[Path],
        *,
        min_free_gb: float,
        warn_hours: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folders = list(dict.fromkeys(Path(f) for f in folders))
        self.min_free_bytes = int(min_free_gb * (1 << 30))
        self.warn_s = warn_hours * 3600.0
        self._clock = clock
        self._seen: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=WINDOW)
        self._warned_at: float | None = None

    def fullest(self) -> tuple[Path, int, int] | None:
        """(folder, free bytes, floor in bytes) of the folder with the least free space
        above its floor; None when none can be read (all remote)."""
        best: tuple[Path, int, int] | None = None
        for folder in self.folders:
            usage = _usage(folder)
            if usage is None:
                continue
            free, total = usage
            floor = min(self.min_free_bytes, int(total * FLOOR_SHARE))
            if best is None or free - floor < best[1] - best[2]:
                best = (folder, free, floor)
        return best

    def observe(self, step: int, steps_to_go: int | None = None) -> tuple[str | None, str | None]:
        """After ``step``: (a warning line or None, the line that stops the run or None);
        ``steps_to_go``: the steps the run has left (None: unknown)."""
        if self.min_free_bytes <= 0:
            return None, None
        now = self._clock()
        fullest = self.fullest()
        if fullest is None:
            return None, None
        folder, free, floor = fullest
        self._seen.append((now, step, free))
        if free < floor:
            return None, (
                f"disk nearly full: {human_bytes(free)} free on {folder}, below "
                f"runtime_monitor.min_free_disk_gb (here {human_bytes(floor)}); the run "
                f"stopped after step {step} before a write could fail ({BOUNDS}); free some "
                "space there, then run the same command again to resume"
            )
        rate_s, per_step = self.rate()
        if rate_s <= 0 or self.warn_s <= 0:
            return None, None
        hours_left = (free - floor) / rate_s / 3600.0
        if hours_left * 3600.0 >= self.warn_s:
            return None, None
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            return None, None
        steps_left = int((free - floor) / per_step) if per_step > 0 else 0
        if steps_to_go is not None and per_step > 0 and steps_left >= steps_to_go:
            return None, None  # the run ends before its own writes reach the floor
        self._warned_at = now
        return (
            f"disk filling: {human_bytes(free)} free on {folder}, ~{human_bytes(int(per_step))} "
            f"used per step: the run stops at {human_bytes(floor)} free "
            f"(runtime_monitor.min_free_disk_gb) in ~{hours_left:.1f} h (~{steps_left} "
            f"steps) at this rate; {BOUNDS}",
            None,
        )

    def rate(self) -> tuple[float, float]:
        """Bytes used per second and per step over the window (0 when too few
        readings, or when space was freed)."""
        if len(self._seen) < 2:
            return 0.0, 0.0
        (t0, s0, f0), (t1, s1, f1) = self._seen[0], self._seen[-1]
        used = f0 - f1
        if used <= 0 or t1 <= t0 or s1 <= s0:
            return 0.0, 0.0
        return used / (t1 - t0), used / (s1 - s0)
