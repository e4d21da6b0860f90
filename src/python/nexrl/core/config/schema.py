"""The typed recipe schema: one dataclass per section, every field documented once.

``RecipeConfig`` is the root; sections live in ``nexrl.core.config.sections``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nexrl.core.config.fields import MISSING, cfg_field
from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.config.sections.cluster import ClusterConfig
from nexrl.core.config.sections.data import DataConfig
from nexrl.core.config.sections.pool import TrajectoryPoolConfig
from nexrl.core.config.sections.rollout import RolloutWorkerConfig
from nexrl.core.config.sections.runtime import (
    LoggerConfig,
    ModelConfig,
    ResourceConfig,
    ResumeConfig,
    RuntimeMonitorConfig,
    ServiceConfig,
    ValidateConfig,
)
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.core.config.sections.weight import WeightConfig


@dataclass
class RecipeConfig:
    project_name: str = cfg_field("nexrl", help="Project label for logs and metrics.")
    experiment_name: str = cfg_field(MISSING, help="Run name; outputs go to output_dir.")
    output_dir: str = cfg_field(
        "runs/${experiment_name}",
        help="Run folder: pool.zarr, snapshots, checkpoints, metrics.jsonl, plots.",
    )
    seed: int = cfg_field(42, help="Global seed (data order, sampling, init).")
    mode: str = cfg_field(
        "rl",
        help="'rl': rollouts, rewards and the RL trainer (the loop in docs/developer-guide.md); "
        "'sft': supervised fine-tuning from a dataset of conversations (data.data_files, "
        "JSON lines of OpenAI-style 'messages'), no rollouts, no inference service: needs "
        "trainer.type self_hosted_sft; validation loss on validate.data_files every "
        "validate.every steps (docs/user-guide.md, 'Supervised fine-tuning from a dataset').",
        choices=("rl", "sft"),
    )
    plugins: list[str] = cfg_field(
        default_factory=list,
        help="Python files (path/to/file.py, a recipe path) or modules (package.module) "
        "imported in the driver before the recipe check and in every Dask worker, so what "
        "they register (e.g. @ADVANTAGE_ESTIMATORS.register('name')) can be named here.",
    )
    model: ModelConfig = cfg_field(default_factory=ModelConfig, help="The policy model.")
    data: DataConfig = cfg_field(default_factory=DataConfig, help="Training data.")
    rollout_worker: RolloutWorkerConfig = cfg_field(
        default_factory=RolloutWorkerConfig, help="Rollouts and evaluation."
    )
    trajectory_pool: TrajectoryPoolConfig = cfg_field(
        default_factory=TrajectoryPoolConfig, help="The zarr trajectory pool."
    )
    algorithm: AlgorithmConfig = cfg_field(
        default_factory=AlgorithmConfig, help="RL algorithm (registered names)."
    )
    trainer: TrainerConfig = cfg_field(default_factory=TrainerConfig, help="The trainer.")
    weight: WeightConfig = cfg_field(default_factory=WeightConfig, help="Weight sync.")
    validate: ValidateConfig = cfg_field(default_factory=ValidateConfig, help="Validation.")
    service: ServiceConfig = cfg_field(default_factory=ServiceConfig, help="Services.")
    cluster: ClusterConfig = cfg_field(default_factory=ClusterConfig, help="Dask cluster.")
    logger: LoggerConfig = cfg_field(default_factory=LoggerConfig, help="Metrics and logs.")
    runtime_monitor: RuntimeMonitorConfig = cfg_field(
        default_factory=RuntimeMonitorConfig, help="Health checks and failure limits."
    )
    resource: ResourceConfig = cfg_field(
        default_factory=ResourceConfig, help="Dask resources per component."
    )
    resume: ResumeConfig = cfg_field(default_factory=ResumeConfig, help="Checkpoint resume.")


def typed(section: Any) -> Any:
    """A recipe section as its dataclass, interpolations resolved (a dataclass
    instance is returned as it is)."""
    return OmegaConf.to_object(section) if isinstance(section, DictConfig) else section
