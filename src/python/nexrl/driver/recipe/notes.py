"""Warnings about what a command line's overrides change beyond the key they set.

``override_notes(recipe, overrides)`` returns one line per such effect; the CLI
prints each as a ``warning:`` line before the run starts. Today there is one:
``trainer.total_train_steps`` overridden on a decaying LR schedule that has no
``trainer.lr_schedule_steps`` of its own also moves the schedule's end (the
learning rate then reaches 0 at the new, shorter end).
"""

from __future__ import annotations

import logging

from omegaconf import OmegaConf

from nexrl.driver.recipe.compose import load_recipe
from nexrl.driver.recipe.load import Recipe

__all__ = ["override_notes"]

log = logging.getLogger("nexrl.driver.recipe")
TOTAL = "trainer.total_train_steps"
SCHEDULE = "trainer.lr_schedule_steps"


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def override_notes(recipe: Recipe, overrides: list[str] | tuple[str, ...]) -> list[str]:
    """The side effects of ``overrides`` worth a warning (see the module doc)."""
    keys = {_key(o) for o in overrides}
    trainer = recipe.cfg.trainer
    if TOTAL not in keys or SCHEDULE in keys or trainer.lr_schedule_steps is not None:
        return []
    if trainer.lr_scheduler == "constant":
        return []
    total = int(trainer.total_train_steps)
    try:  # the recipe's own value: composed again without the override
        base_cfg = load_recipe(recipe.path, [o for o in overrides if _key(o) != TOTAL])
        base = OmegaConf.select(base_cfg, TOTAL, default=None)
    except Exception:  # the note must never stop a run that loaded
        log.debug("composing %s without %s failed", recipe.path, TOTAL, exc_info=True)
        base = None
    if base is not None and int(base) == total:
        return []
    was = f" instead of the recipe's step {base}" if base is not None else ""
    keep = str(base) if base is not None else "<the recipe's total_train_steps>"
    return [
        f"{TOTAL}={total} also ends the {trainer.lr_scheduler} LR schedule at step "
        f"{total}{was}; to stop early on the recipe's schedule add {SCHEDULE}={keep}"
    ]
