"""The trainer wing: self-hosted trainers (GRPO, PPO with a value model, SFT,
custom) on a training engine, their Dask actors, ``algorithms`` and the
training ``service``.

Importing this package imports nothing heavy: each name below loads its module
(and torch) on first use (PEP 562), so ``nexrl.trainer.service``'s client and
``nexrl.trainer.algorithms``'s recipe checks stay light. The engine
(``backends.trainer.<trainer.backend>_engine``) is imported when a trainer is built.
"""

from typing import TYPE_CHECKING

from nexrl.core.util.lazy import lazy_names

if TYPE_CHECKING:
    from nexrl.trainer.actor import RankInfo, TrainerActor, TrainerGroup, TrainerGroupError
    from nexrl.trainer.base import SelfHostedTrainer, TrainerError
    from nexrl.trainer.batch_io import BatchRef, load_batch, save_batch
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

_HOME = {
    "RankInfo": "actor",
    "TrainerActor": "actor",
    "TrainerGroup": "actor",
    "TrainerGroupError": "actor",
    "SelfHostedTrainer": "base",
    "TrainerError": "base",
    "BatchRef": "batch_io",
    "load_batch": "batch_io",
    "save_batch": "batch_io",
    "TrainingEngine": "engine",
    "load_backend": "engine",
    "SelfHostedGrpoTrainer": "grpo",
    "TrainerHandle": "handle",
    "PendingCall": "pending",
    "SelfHostedPpoTrainer": "ppo",
    "TRAINERS": "registry",
    "create_trainer": "registry",
    "load_custom_trainer": "registry",
    "resolve_trainer_class": "registry",
    "StepResult": "result",
    "lr_factor": "schedule",
    "SelfHostedSftTrainer": "sft",
    "TrainerSpec": "spec",
}


__getattr__ = lazy_names(__name__, _HOME)


__all__ = [
    "TRAINERS",
    "BatchRef",
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
