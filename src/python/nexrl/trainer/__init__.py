"""Self-hosted trainers (GRPO, PPO with a value model, SFT, custom) on a training engine, and their Dask actors.

Importing this package imports torch but never a training backend: the engine
(``backends.training.<trainer.backend>_engine``) is imported when a trainer is built.
"""

from nexrl.trainer.actor import RankInfo, TrainerActor, TrainerGroup, TrainerGroupError
from nexrl.trainer.base import SelfHostedTrainer, TrainerError
from nexrl.trainer.batch_io import load_batch, save_batch
from nexrl.trainer.engine import TrainingEngine, load_backend
from nexrl.trainer.grpo import SelfHostedGrpoTrainer
from nexrl.trainer.handle import TrainerHandle
from nexrl.trainer.pending import PendingCall
from nexrl.trainer.ppo import SelfHostedPpoTrainer
from nexrl.trainer.registry import (
    TRAINERS,
    create_trainer,
    load_custom_trainer,
    resolve_trainer_class,
)
from nexrl.trainer.result import StepResult
from nexrl.trainer.schedule import lr_factor
from nexrl.trainer.sft import SelfHostedSftTrainer
from nexrl.trainer.spec import TrainerSpec

__all__ = [
    "TRAINERS",
    "PendingCall",
    "RankInfo",
    "SelfHostedGrpoTrainer",
    "SelfHostedPpoTrainer",
    "SelfHostedSftTrainer",
    "SelfHostedTrainer",
    "StepResult",
    "TrainerActor",
    "TrainerError",
    "TrainerGroup",
    "TrainerGroupError",
    "TrainerHandle",
    "TrainerSpec",
    "TrainingEngine",
    "create_trainer",
    "load_backend",
    "load_batch",
    "load_custom_trainer",
    "lr_factor",
    "resolve_trainer_class",
    "save_batch",
]
