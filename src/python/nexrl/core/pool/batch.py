"""``PoolBatch`` (what the trainer gets) and ``PoolStats`` (what the controller reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.core.pool.rows import PoolRows

if TYPE_CHECKING:
    from nexrl.core.types.trajectory import Trajectory

__all__ = ["PoolBatch", "PoolStats"]


@dataclass
class PoolBatch:
    """Whole groups of trajectories handed to the trainer, once.

    ``columns`` holds the trajectories group after group; ``group_index[i]`` is
    the group (0..num_groups-1 within this batch) of trajectory ``i``.
    """

    columns: TrajectoryColumns
    group_index: np.ndarray
    step: int  # 1-based batch number of this consumer: the training step that takes it
    generation: int  # cursor generation saved with this batch (see TrajectoryPool.state_dict)
    current_version: int | None  # trainer policy version the lag is measured against
    released_groups: int  # short groups released by the group timeout
    weight_sync_trajectories: int  # trajectories committed while a weight sync was running
    ids: list[tuple[str, int, int]] = field(default_factory=list)  # (writer, commit, index)
    rows: PoolRows | None = None  # where the trajectories are: what a trainer rank reads

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def num_groups(self) -> int:
        return int(self.group_index.max()) + 1 if len(self.group_index) else 0

    @property
    def version_lag(self) -> np.ndarray | None:
        """``current_version - policy_version`` per trajectory (None if the version is unknown)."""
        if self.current_version is None:
            return None
        return self.current_version - self.columns.policy_version

    @property
    def max_version_lag(self) -> int | None:
        lag = self.version_lag
        return None if lag is None or not len(lag) else int(lag.max())

    @property
    def mean_version_lag(self) -> float | None:
        lag = self.version_lag
        return None if lag is None or not len(lag) else float(lag.mean())

    def trajectories(self) -> list[Trajectory]:
        """The batch as ``Trajectory`` objects (``Batch.from_trajectories`` takes these)."""
        return self.columns.to_trajectories()

    def metrics(self) -> dict[str, float]:
        """Scalars to log with the training step."""
        out = {
            "pool/batch_size": float(len(self)),
            "pool/num_groups": float(self.num_groups),
            "pool/released_groups": float(self.released_groups),
            "pool/weight_sync_trajectories": float(self.weight_sync_trajectories),
            "pool/min_policy_version": float(self.columns.policy_version.min()),
            "pool/max_policy_version": float(self.columns.policy_version.max()),
        }
        # (the version lag is logged once, by the controller: version/lag_max)
        return out


@dataclass(frozen=True)
class PoolStats:
    """Counts for the controller (readiness, progress) and for logging."""

    committed: int  # trajectories ever committed (visible) to this consumer's knowledge
    pending: int  # committed, not yet delivered or dropped
    ready: int  # pending trajectories in complete (or released) groups, indexed so far
    open_groups: int  # groups still waiting for members
    open_trajectories: int
    unindexed: int  # pending trajectories whose commits are not indexed yet
    writers: int
    steps: int  # batches delivered
    generation: int
    delivered: int
    released_groups: int
    timeout_dropped_groups: int
    timeout_dropped_trajectories: int
    stale_dropped_groups: int
    stale_dropped_trajectories: int
    filtered_groups: int  # groups dropped by the group filter (dynamic sampling)
    filtered_trajectories: int
    weight_sync: bool  # a weight sync is in progress
    current_version: int | None
    duplicate_dropped_groups: int = 0  # second copies of a group (dedup_groups), dropped
    duplicate_dropped_trajectories: int = 0
