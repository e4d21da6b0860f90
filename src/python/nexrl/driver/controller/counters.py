"""``RunCounters``: what a run has counted so far, one field each.

The controller owns one; the scheduler, the harvest and the cluster watch change it
through its methods; every step's row shows it (``report.counter_metrics``) and every
checkpoint keeps it (``state.ControllerState.counters``), so a resumed run counts on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["RunCounters"]


@dataclass
class RunCounters:
    """Counts since the run began (a resume restores them)."""

    failed_groups: int = 0  # rollout or evaluator tasks that failed, a group each
    duplicate_trajectories_dropped: int = 0  # second copies of a group, never trained
    delivered_trajectories: int = 0  # what the pool handed out for training
    evaluator_errors: int = 0  # samples whose evaluator raised (scored 0)
    rows_not_evaluated: int = 0  # data rows whose every sample had an evaluator error
    groups_rolled_out: int = 0  # groups that came back scored
    inference_restarts: int = 0  # inference servers replaced
    retried_groups: int = 0  # failed groups rolled out again
    retry_backoff_s: float = 0.0  # the waits before those retries, summed
    workers_lost: int = 0  # Dask workers that went away with tasks running
    stragglers_backed_up: int = 0  # training tasks given a second copy

    def group_done(self, evaluator_errors: int) -> None:
        self.groups_rolled_out += 1
        self.evaluator_errors += evaluator_errors

    def group_failed(self) -> None:
        self.failed_groups += 1

    def group_retried(self, delay_s: float) -> None:
        self.retried_groups += 1
        self.retry_backoff_s += delay_s

    def row_not_evaluated(self) -> None:
        self.rows_not_evaluated += 1

    def duplicates_dropped(self, trajectories: int) -> None:
        self.duplicate_trajectories_dropped += trajectories

    def delivered(self, trajectories: int) -> None:
        self.delivered_trajectories += trajectories

    def backed_up(self, tasks: int) -> None:
        self.stragglers_backed_up += tasks

    def worker_lost(self) -> None:
        self.workers_lost += 1

    def inference_restarted(self, times: int) -> None:
        self.inference_restarts += times

    def to_dict(self) -> dict[str, float]:
        """For the checkpoint."""
        return {k: float(v) for k, v in asdict(self).items()}

    def restore(self, saved: dict[str, Any]) -> None:
        """Take a checkpoint's counts (a name this version does not count is ignored)."""
        for f in fields(self):
            if f.name in saved:
                setattr(self, f.name, type(getattr(self, f.name))(saved[f.name]))
