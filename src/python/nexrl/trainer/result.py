"""``StepResult``: what one trainer step returns (typed), and the metrics row built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["StepResult"]


@dataclass(frozen=True)
class StepResult:
    """One ``train_step`` of a trainer rank.

    Attributes:
        global_step / policy_version: the trainer's counters after the step.
        published_version: the snapshot version this step published, or None.
        snapshot_path: where that snapshot was written (rank 0; None on the other
            ranks and when nothing was published): weight sync loads it from there.
        handoff: with the weight handoff in memory on (rank 0), the channel's descriptor
            (``nexrl.core.weights.handoff``): weight sync copies from it, and the snapshot
            at ``snapshot_path`` appears once written behind.
        metrics: the step's measurements (losses, batch statistics, timings).
    """

    global_step: int
    policy_version: int
    published_version: int | None = None
    snapshot_path: str | None = None
    handoff: dict[str, Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, float]:
        """The metrics row: ``metrics`` plus the versions (``trainer/global_step``,
        ``trainer/policy_version``, ``weight/published_version`` when published)."""
        out = dict(self.metrics)
        if self.published_version is not None:
            out["weight/published_version"] = float(self.published_version)
        out["trainer/global_step"] = float(self.global_step)
        out["trainer/policy_version"] = float(self.policy_version)
        return out
