"""Trainer classes by ``trainer.type``, custom trainers from a file, and the factory.

``trainer.custom_trainer_module_path`` + ``trainer.custom_trainer_class_name``
name a user class (a subclass of ``SelfHostedTrainer``, usually of
``SelfHostedGrpoTrainer`` overriding ``_prepare_batch``); it takes precedence
over ``trainer.type``. Every mistake raises ``RecipeError`` naming the field,
the file and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.algorithms.registry import Registry
from nexrl.config.errors import RecipeError
from nexrl.config.modules import load_object
from nexrl.trainer.base import SelfHostedTrainer
from nexrl.trainer.grpo import SelfHostedGrpoTrainer
from nexrl.trainer.sft import SelfHostedSftTrainer
from nexrl.trainer.spec import TrainerSpec

__all__ = ["TRAINERS", "create_trainer", "load_custom_trainer", "resolve_trainer_class"]

TRAINERS: Registry[type[SelfHostedTrainer]] = Registry("trainer type")
TRAINERS.register("self_hosted_grpo")(SelfHostedGrpoTrainer)
TRAINERS.register("self_hosted_sft")(SelfHostedSftTrainer)

_PATH_FIELD = "trainer.custom_trainer_module_path"
_CLASS_FIELD = "trainer.custom_trainer_class_name"


def load_custom_trainer(
    module_path: str, class_name: str | None, roots: Sequence[str | Path] = ()
) -> type[SelfHostedTrainer]:
    """Import ``class_name`` from ``module_path`` and check it is a trainer class."""
    if not class_name:
        raise RecipeError(
            [f"{_CLASS_FIELD}: not set; name the trainer class defined in '{module_path}'"]
        )
    search = [Path(r) for r in roots] or [Path.cwd()]
    obj: Any = load_object(module_path, class_name, search, _PATH_FIELD)
    if not (inspect.isclass(obj) and issubclass(obj, SelfHostedTrainer)):
        kind = "class" if inspect.isclass(obj) else type(obj).__name__
        raise RecipeError(
            [
                f"{_CLASS_FIELD}: '{class_name}' in '{module_path}' is a {kind} that does not "
                "subclass nexrl.trainer.SelfHostedTrainer; derive it from SelfHostedTrainer or "
                "SelfHostedGrpoTrainer and override _prepare_batch / _compute_loss"
            ]
        )
    return obj


def resolve_trainer_class(
    trainer_cfg: Any, roots: Sequence[str | Path] = ()
) -> type[SelfHostedTrainer]:
    """The class a ``trainer`` section selects (custom class first, then ``type``)."""
    path = getattr(trainer_cfg, "custom_trainer_module_path", None)
    name = getattr(trainer_cfg, "custom_trainer_class_name", None)
    if path:
        return load_custom_trainer(path, name, roots)
    if name:
        raise RecipeError(
            [
                f"{_CLASS_FIELD}: '{name}' is set but {_PATH_FIELD} is not; set the file that "
                "defines it (path/to/trainer.py)"
            ]
        )
    try:
        return TRAINERS.get(trainer_cfg.type)
    except KeyError as exc:
        raise RecipeError([f"trainer.type: {exc}"]) from None


def create_trainer(spec: TrainerSpec, **kwargs: Any) -> SelfHostedTrainer:
    """Build this rank's trainer for ``spec`` (collective when ``world_size > 1``)."""
    cls = resolve_trainer_class(spec.trainer, spec.roots)
    return cls(spec, **kwargs)
