"""``TrainedGroups``: the record of which prompt groups a run has trained, in bounded memory.

The controller trains each group from the first pool commit it sees and drops later
copies (a Dask future that ran twice committed its group twice; see
``nexrl.driver.controller.state``). Deciding that needs, per group, the commit it was trained
from only while the rest of that same commit can still be handed out: a commit is
one group's trajectories, written together and read back in commit order, so they
reach the trainer in the same or the next batch. For older groups the id alone
decides (any copy seen again is a second one).

So the record is two parts:

* ``recent``: the newest ``window`` trained groups, group id -> commit
  (``"writer/commit"``), in the order they were trained;
* ``ranges``: every older trained id, as sorted, disjoint, half-open ``[lo, hi)``
  ranges. The data loader numbers groups in the order it hands them out and a run
  trains them nearly in that order, so the ranges stay few: one per gap (a group
  that failed for good, or still in flight) however long the run is.

Before this record, every trained group was a dict entry (~150 bytes in the driver
and ~50 in every checkpoint) for the life of the run (docs/benchmarks.md, "Long
haul"); now both are bounded by ``window`` plus the number of gaps.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["WINDOW", "TrainedGroups"]

# Groups whose commit is remembered. A commit spans at most one batch boundary, so
# anything above a few batches would do; 4096 is 256 steps of 16 groups and ~600 kB.
WINDOW = 4096


class TrainedGroups:
    """The trained groups (module doc): ``first(group, origin)`` is the dedup test."""

    def __init__(self, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.recent: dict[int, str] = {}
        self.ranges: list[list[int]] = []  # sorted, disjoint, non-adjacent [lo, hi)

    # -- the dedup test ----------------------------------------------------------
    def first(self, group: int, origin: str) -> bool:
        """True when ``group`` is trained from ``origin``: its first commit seen, or more
        of that same commit. False for a copy from another commit (a second one)."""
        known = self.recent.get(group)
        if known is not None:
            return known == origin
        if self._in_ranges(group):
            return False
        self.recent[group] = origin
        if len(self.recent) > self.window:
            oldest = next(iter(self.recent))
            del self.recent[oldest]
            self._add_to_ranges(oldest)
        return True

    # -- what a user and a test read ---------------------------------------------
    def __len__(self) -> int:
        return len(self.recent) + sum(hi - lo for lo, hi in self.ranges)

    def __contains__(self, group: object) -> bool:
        return isinstance(group, int) and (group in self.recent or self._in_ranges(group))

    def __iter__(self) -> Iterator[int]:
        """Every trained group id (the ranges expanded), oldest ranges first."""
        for lo, hi in self.ranges:
            yield from range(lo, hi)
        yield from self.recent

    # -- checkpoints ---------------------------------------------------------------
    def state(self) -> tuple[dict[int, str], list[list[int]]]:
        """What a checkpoint holds: ``recent`` (copied) and ``ranges`` (copied)."""
        return dict(self.recent), [list(r) for r in self.ranges]

    @classmethod
    def restored(
        cls,
        recent: dict[Any, str],
        ranges: Iterable[Iterable[int]] = (),
        window: int = WINDOW,
    ) -> TrainedGroups:
        """The record of a checkpoint. A checkpoint written before the ranges existed
        holds every trained group in ``recent``; all but the newest ``window`` of them
        move to the ranges."""
        out = cls(window)
        for lo, hi in ranges:
            out._add_range(int(lo), int(hi))
        for group, origin in recent.items():
            out.first(int(group), str(origin))
        return out

    # -- the ranges ----------------------------------------------------------------
    def _in_ranges(self, group: int) -> bool:
        i = bisect.bisect_right(self.ranges, [group, float("inf")]) - 1
        return i >= 0 and self.ranges[i][0] <= group < self.ranges[i][1]

    def _add_to_ranges(self, group: int) -> None:
        self._add_range(group, group + 1)

    def _add_range(self, lo: int, hi: int) -> None:
        """Adds ``[lo, hi)``, merging with every range it overlaps or touches."""
        if lo >= hi:
            return
        i = bisect.bisect_left(self.ranges, [lo, lo])
        if i > 0 and self.ranges[i - 1][1] >= lo:  # touches the range before it
            i -= 1
        j = i
        while j < len(self.ranges) and self.ranges[j][0] <= hi:
            lo = min(lo, self.ranges[j][0])
            hi = max(hi, self.ranges[j][1])
            j += 1
        self.ranges[i:j] = [[lo, hi]]
