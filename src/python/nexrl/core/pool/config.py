"""``PoolConfig``: what a pool runs with, the recipe's ``trajectory_pool`` section plus
the group size (``rollout_worker.group_size``, samples per prompt)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nexrl.core.config.sections.pool import TrajectoryPoolConfig

__all__ = ["PoolConfig"]


@dataclass
class PoolConfig(TrajectoryPoolConfig):
    """``trajectory_pool`` plus ``group_size``: trajectories per group when ``key_list``
    is set (the recipe's ``rollout_worker.group_size``); ignored without ``key_list``."""

    group_size: int = 1
    filter_zero_variance: bool = False  # dynamic sampling (algorithm.filter_zero_variance_groups)
    # Each group id is delivered from one commit: a group committed again (a Dask task that
    # ran twice) is dropped as a duplicate, before a batch is picked (the controller's pool).
    dedup_groups: bool = False

    @classmethod
    def from_section(
        cls,
        section: Any,
        group_size: int,
        filter_zero_variance: bool = False,
        dedup_groups: bool = False,
    ) -> PoolConfig:
        """From a typed ``trajectory_pool`` section, the recipe's group size,
        ``algorithm.filter_zero_variance_groups`` and ``dedup_groups``."""
        values = {
            f.name: getattr(section, f.name) for f in dataclasses.fields(TrajectoryPoolConfig)
        }
        return cls(
            **values,
            group_size=int(group_size),
            filter_zero_variance=bool(filter_zero_variance),
            dedup_groups=bool(dedup_groups),
        )
