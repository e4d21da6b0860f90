"""Trainer classes by ``trainer.type``: a registered name or a class; the factory.

``trainer.type`` is a registered trainer (``self_hosted_grpo``,
``self_hosted_ppo``, ``self_hosted_sft``, or a plugin's ``@TRAINERS.register("name")``) or a user
class, ``path/to/file.py:ClassName`` (a subclass of ``SelfHostedTrainer``,
usually of ``SelfHostedGrpoTrainer`` overriding ``prepare_batch``).
``trainer.custom_trainer`` is the older form of a class in ``type``; it takes
precedence over ``trainer.type``. Every mistake raises ``RecipeError`` naming the field,
the file and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.core.plugins import load_object, split_spec
from nexrl.core.plugins.registry import Registry
from nexrl.trainer.base import SelfHostedTrainer
from nexrl.trainer.grpo import SelfHostedGrpoTrainer
from nexrl.trainer.ppo import SelfHostedPpoTrainer
from nexrl.trainer.sft import SelfHostedSftTrainer
from nexrl.trainer.spec import TrainerSpec

__all__ = ["TRAINERS", "create_trainer", "load_custom_trainer", "resolve_trainer_class"]

TRAINERS: Registry[type[SelfHostedTrainer]] = Registry(
    "trainer type", base=SelfHostedTrainer, field="trainer.type"
)
TRAINERS.register("self_hosted_grpo")(SelfHostedGrpoTrainer)
TRAINERS.register("self_hosted_sft")(SelfHostedSftTrainer)
TRAINERS.register("self_hosted_ppo")(SelfHostedPpoTrainer)

FIELD = "trainer.custom_trainer"


def load_custom_trainer(spec: str, roots: Sequence[str | Path] = ()) -> type[SelfHostedTrainer]:
    """Import the class ``spec`` names (``path/to/file.py:ClassName`` or
    ``package.module:ClassName``) and check it is a trainer class."""
    search = [Path(r) for r in roots] or [Path.cwd()]
    file, class_name = split_spec(spec, FIELD)
    obj: Any = load_object(file, class_name, search, FIELD)
    if not (inspect.isclass(obj) and issubclass(obj, SelfHostedTrainer)):
        kind = "class" if inspect.isclass(obj) else type(obj).__name__
        raise RecipeError(
            [
                f"{FIELD}: '{class_name}' in '{file}' is a {kind} that does not "
                "subclass nexrl.trainer.SelfHostedTrainer; derive it from SelfHostedTrainer or "
                "SelfHostedGrpoTrainer and override prepare_batch / compute_loss"
            ]
        )
    return obj


def resolve_trainer_class(
    trainer_cfg: TrainerConfig, roots: Sequence[str | Path] = ()
) -> type[SelfHostedTrainer]:
    """The class a ``trainer`` section selects (custom class first, then ``type``)."""
    if trainer_cfg.custom_trainer:
        return load_custom_trainer(trainer_cfg.custom_trainer, roots)
    try:
        return TRAINERS.get(trainer_cfg.type, roots=[Path(r) for r in roots] or [Path.cwd()])
    except KeyError as exc:
        raise RecipeError([f"trainer.type: {exc}"]) from None


def create_trainer(spec: TrainerSpec, **kwargs: Any) -> SelfHostedTrainer:
    """Build this rank's trainer for ``spec`` (collective when ``world_size > 1``)."""
    cls = resolve_trainer_class(spec.trainer, spec.roots)
    return cls(spec, **kwargs)
