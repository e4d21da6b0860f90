"""Grouping and batch selection, free of storage: the rules of the pool in one place.

Trajectories (opaque integer refs) are added with a group key and an arrival
time. Without grouping every trajectory is a ready group of one. With grouping
a group is *ready* when it holds ``group_size`` trajectories; a trajectory
whose key already has a full group starts a new group with that key (as
NexRL's grouped stores do). A group still open ``timeout`` seconds after its
first trajectory arrived is handed back by ``expire`` so the caller can
release it (deliver it short) or drop it: nothing waits forever.

Batches are whole ready groups, oldest first (``take``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["Group", "GroupIndex"]


@dataclass
class Group:
    key: Hashable
    first_arrival: float
    refs: list[int] = field(default_factory=list)
    released: bool = False  # handed out before it filled (timeout with action "release")
    screened: bool = False  # the pool's group filter has seen it (and kept it)

    def __len__(self) -> int:
        return len(self.refs)


class GroupIndex:
    """Open and ready groups of pending trajectories."""

    def __init__(self, group_size: int, grouped: bool) -> None:
        if group_size < 1:
            raise ValueError("group_size must be >= 1")
        self.group_size = group_size if grouped else 1
        self.grouped = grouped
        self._open: dict[Hashable, Group] = {}
        self._ready: dict[int, Group] = {}  # serial -> group, in the order they became ready
        self._serial = 0
        self.ready_trajectories = 0
        self.open_trajectories = 0

    # -- input -------------------------------------------------------------
    def add(self, ref: int, key: Hashable, arrival: float) -> None:
        if self.group_size == 1:
            self._push_ready(Group(key, arrival, [ref]))
            return
        g = self._open.get(key)
        if g is None:
            g = self._open[key] = Group(key, arrival)
        g.refs.append(ref)
        g.first_arrival = min(g.first_arrival, arrival)
        self.open_trajectories += 1
        if len(g) >= self.group_size:
            del self._open[key]
            self.open_trajectories -= len(g)
            self._push_ready(g)

    def _push_ready(self, g: Group) -> None:
        self._ready[self._serial] = g
        self._serial += 1
        self.ready_trajectories += len(g)

    # -- timeouts ----------------------------------------------------------
    def expire(self, horizon: float, timeout: float) -> list[Group]:
        """Remove and return open groups whose first trajectory arrived before ``horizon - timeout``."""
        old = [k for k, g in self._open.items() if g.first_arrival + timeout < horizon]
        out = [self._open.pop(k) for k in old]
        self.open_trajectories -= sum(len(g) for g in out)
        return out

    def release(self, g: Group) -> None:
        """Make an expired (short) group ready."""
        g.released = True
        self._push_ready(g)

    # -- output ------------------------------------------------------------
    @property
    def open_groups(self) -> int:
        return len(self._open)

    def unscreened(self) -> list[Group]:
        """Ready groups the group filter has not seen yet, oldest first."""
        return [g for g in self._ready.values() if not g.screened]

    def purge(self, reject: Callable[[Group], bool]) -> list[Group]:
        """Remove and return the ready groups for which ``reject`` is true."""
        return [self._pop(s) for s, g in list(self._ready.items()) if reject(g)]

    def take(
        self, limit: int | None, reject: Callable[[Group], bool] | None = None
    ) -> tuple[list[Group], list[Group]]:
        """Remove whole ready groups, oldest first, totalling at most ``limit`` trajectories.

        ``limit=None`` takes every ready group. A group that does not fit in
        what is left is skipped (it stays, first in line for the next batch),
        except that a first group larger than ``limit`` is taken alone. Groups
        for which ``reject`` is true are removed and returned separately.
        Returns ``(taken, rejected)``.
        """
        taken: list[Group] = []
        rejected: list[Group] = []
        total = 0
        for serial in list(self._ready):
            if limit is not None and total >= limit:
                break
            g = self._ready[serial]
            if reject is not None and reject(g):
                rejected.append(self._pop(serial))
                continue
            if limit is not None and total + len(g) > limit and taken:
                continue
            taken.append(self._pop(serial))
            total += len(g)
        return taken, rejected

    def _pop(self, serial: int) -> Group:
        g = self._ready.pop(serial)
        self.ready_trajectories -= len(g)
        return g
