"""``TrainerRank``: what the step's parts (``update``, ``saving``) use of one trainer rank.

``SelfHostedTrainer`` satisfies it; the parts take it instead of importing the
trainer class, so the trainer's modules form no import circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.core.types.batch import Batch
from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import PublishedSnapshot, SnapshotPublisher
from nexrl.trainer.engine import TrainingEngine
from nexrl.trainer.spec import TrainerSpec

__all__ = ["TrainerRank"]


class TrainerRank(Protocol):
    """One data-parallel rank's state and hooks (see ``nexrl.trainer.base``)."""

    spec: TrainerSpec
    cfg: TrainerConfig
    algo: AlgorithmConfig
    loss_agg_mode: str
    engine: TrainingEngine
    extra_engines: dict[str, TrainingEngine]  # checkpointed beside engine (a critic's)
    rank: int
    world_size: int
    device: torch.device
    lora: bool
    packing: bool  # trainer.packing on, and the model keeps packed sequences apart
    model_config: Any
    ref_model: torch.nn.Module | None
    global_step: int
    policy_version: int
    optimizer_steps: int
    nonfinite_total: int
    nonfinite_streak: int
    extra_state: dict[str, Any]
    last_snapshot: PublishedSnapshot | None
    publisher: SnapshotPublisher | None
    handoff: Any  # nexrl.trainer.handoff.TrainerHandoff on rank 0 while it is on, else None
    checkpoints: CheckpointManager | None
    resumed_from: Path | None
    resume_note: str | None

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def publish_snapshot(self) -> PublishedSnapshot | None: ...

    def forward(self, mb: Batch, *, entropy_grad: bool | None) -> tuple[Tensor, Tensor | None]: ...

    def compute_loss(
        self, mb: Batch, log_probs: Tensor, entropy: Tensor | None
    ) -> tuple[Tensor, dict[str, Tensor | float]]: ...

    def _after_old_log_probs(self, batch: Batch) -> dict[str, float]: ...
