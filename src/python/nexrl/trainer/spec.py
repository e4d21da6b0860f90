"""``TrainerSpec``: everything one trainer rank needs to build itself (picklable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.config.sections.trainer import TrainerConfig

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig

__all__ = ["TrainerSpec"]


@dataclass
class TrainerSpec:
    """Trainer inputs; sent as-is to every trainer actor.

    Attributes:
        trainer: the ``trainer`` recipe section.
        model_path: Hugging Face folder of the initial policy (config, weights,
            tokenizer); also the reference model when a KL term needs one.
        algorithm: the ``algorithm`` recipe section.
        tokenizer_path: tokenizer folder copied into snapshots (default: model_path).
        snapshot_dir: where ``vN`` snapshots are published (None = never).
        sync_every: publish after every N-th policy update (``weight.sync_every``).
        keep_snapshots: snapshots kept on disk (``weight.keep_snapshots``).
        checkpoint_dir: checkpoint root (None = no checkpoints).
        keep_checkpoints: checkpoints kept (``trainer.keep_checkpoints``; None = all).
        auto_checkpoint: checkpoint inside ``train_step`` every ``trainer.save_every``
            steps and at ``trainer.total_train_steps`` (False: the caller calls
            ``save_checkpoint`` itself, e.g. together with the pool cursor).
        resume_mode / resume_path: ``resume.mode`` / ``resume.path``.
        seed: seeds python, numpy and torch on every rank.
        roots: folders a relative ``custom_trainer`` file is searched in.
        dist_timeout_s: torch.distributed timeout: a collective waiting on a dead
            rank fails after this long instead of hanging.
    """

    trainer: TrainerConfig
    model_path: str
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    tokenizer_path: str | None = None
    snapshot_dir: str | None = None
    sync_every: int = 1
    keep_snapshots: int = 3
    checkpoint_dir: str | None = None
    keep_checkpoints: int | None = None
    auto_checkpoint: bool = True
    resume_mode: str = "disable"
    resume_path: str | None = None
    seed: int = 0
    roots: tuple[str, ...] = ()
    dist_timeout_s: float = 600.0

    @classmethod
    def from_recipe(
        cls,
        cfg: RecipeConfig,
        *,
        model_path: str | Path,
        roots: tuple[str | Path, ...] | list[Any] = (),
    ) -> TrainerSpec:
        """From the checked, typed recipe (``Recipe.spec``).

        ``model_path`` is the initial model folder the caller prepared (a
        ``model.path`` copy or the tiny model it saved). ``algorithm`` is resolved
        (null fields take the chosen algorithm's defaults; ``loss_norm_length``
        defaults to ``rollout_worker.max_response_length``). Checkpoints go to
        ``<output_dir>/checkpoints``.
        """
        from nexrl.trainer.algorithms import resolve_algorithm

        algorithm = resolve_algorithm(
            cfg.algorithm, max_response_length=cfg.rollout_worker.max_response_length
        )
        return cls(
            trainer=cfg.trainer,
            algorithm=algorithm,
            model_path=str(model_path),
            tokenizer_path=cfg.model.tokenizer_path,
            snapshot_dir=cfg.weight.snapshot_dir,
            sync_every=cfg.weight.sync_every,
            keep_snapshots=cfg.weight.keep_snapshots,
            checkpoint_dir=str(Path(cfg.output_dir) / "checkpoints"),
            keep_checkpoints=cfg.trainer.keep_checkpoints,
            resume_mode=cfg.resume.mode,
            resume_path=cfg.resume.path,
            seed=cfg.seed,
            roots=tuple(str(r) for r in roots),
        )
