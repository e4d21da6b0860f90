"""What the controller saves with each trainer checkpoint, and how a run resumes.

A checkpoint at step ``s`` holds, next to the trainer's weights and optimizer:

* ``loader``: the data loader's position (which prompts were handed out);
* ``pool``: the pool consumer's cursor generation after batch ``s``;
* ``pending``: the groups handed out but not yet in the pool (in flight);
* ``counters``: failure and throughput counters;
* ``trained`` / ``trained_ranges``: the groups trained so far
  (``nexrl.driver.controller.trained.TrainedGroups``): the newest with the pool commit each
  came from, the older ones as id ranges;
* ``row``: step ``s``'s metrics row (the checkpoint is written before the row is
  logged: a run killed in between gets the row back from its checkpoint on resume).

Dask runs a future *at least* once: when a worker dies after an evaluator
future committed its group but before its result reached the scheduler, the
future runs again and the group is committed a second time (a second sample).
The controller trains each group from the first commit it sees and drops the
other copies (``rollout/duplicate_trajectories_dropped``), so no prompt group is
trained twice.

Resuming (``resume.mode: auto``) rewinds the pool cursor to ``pool`` (batches
delivered after the checkpoint were never trained into these weights, so they
are delivered again), restores the loader, and re-dispatches ``pending``. A group
that is already committed to the pool (the killed run finished it after the
checkpoint) is not rolled out again: ``committed_group_ids`` lists them and the
controller skips them. So every prompt group is rolled out once and every
committed trajectory is trained on once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["ControllerState", "committed_group_ids"]

STATE_KEY = "controller"


@dataclass
class ControllerState:
    step: int = 0
    loader: dict[str, Any] | None = None
    pool: dict[str, Any] | None = None
    pending: list[list[dict[str, Any]]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    trained: dict[int, str] = field(default_factory=dict)  # newest groups -> commit
    trained_ranges: list[list[int]] = field(default_factory=list)  # older ids, [lo, hi)
    row: dict[str, float] | None = None  # step's metrics row (older checkpoints: None)

    def trained_ids(self) -> set[int]:
        """Every group trained up to this checkpoint."""
        older = (g for lo, hi in self.trained_ranges for g in range(lo, hi))
        return {int(g) for g in self.trained} | set(older)

    def to_extra_state(self) -> dict[str, Any]:
        return {STATE_KEY: asdict(self)}

    @classmethod
    def from_extra_state(cls, extra: dict[str, Any]) -> ControllerState | None:
        raw = extra.get(STATE_KEY)
        if raw is None:
            return None
        return cls(**raw)


def committed_group_ids(pool: Any) -> set[int]:
    """Group ids with at least one trajectory committed to ``pool`` (groups are
    committed whole, one commit per group)."""
    ds = pool.to_xarray()
    if "group_id" not in ds or ds.sizes.get("trajectory", 0) == 0:
        return set()
    return {int(g) for g in np.unique(ds["group_id"].values)}
