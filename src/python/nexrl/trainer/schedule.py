"""Learning-rate schedules (``trainer.lr_scheduler``) as a multiplier of ``trainer.lr``.

For the ``s``-th optimizer update (``s = 0, 1, ...``), ``W`` warm-up steps and
``T`` total updates::

    warm-up (s < W):  f(s) = (s + 1) / W
    then p = min(1, (s - W) / max(1, T - W)) and
      constant:       f(s) = 1
      linear:         f(s) = 1 - p
      cosine:         f(s) = (1 + cos(pi p)) / 2

The same function drives the DeepSpeed backend (as a ``LambdaLR``) and the
plain-PyTorch baseline of the benchmark. ``T`` is ``trainer.lr_schedule_steps``
(else ``trainer.total_train_steps``) times ``trainer.ppo_epochs``. The lr of an
update depends only on ``s`` and the current recipe: a resumed run recomputes it
from the checkpoint's step count, so it continues the schedule rather than
restarting it (``schedule_change_note`` words what changed when the resumed
recipe moved the schedule's end).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["SCHEDULES", "continue_schedule", "lr_factor", "lr_lambda", "schedule_change_note"]

SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(step: int, schedule: str, warmup_steps: int, total_steps: int) -> float:
    """The multiplier ``f(step)`` described in the module doc."""
    if schedule not in SCHEDULES:
        raise ValueError(f"lr_scheduler {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """``step -> f(step)`` for ``torch.optim.lr_scheduler.LambdaLR``."""
    lr_factor(0, schedule, warmup_steps, total_steps)  # validate now

    def factor(step: int) -> float:
        return lr_factor(step, schedule, warmup_steps, total_steps)

    return factor


def schedule_change_note(
    saved_steps: int | None, steps: int, global_step: int, cfg: Any
) -> str | None:
    """One line when a run resumed at ``global_step`` moves the LR schedule's end from
    ``saved_steps`` (the checkpoint's) to ``steps`` training steps; ``None`` when it did
    not move, the checkpoint does not say, or the schedule is constant (no end)."""
    if saved_steps is None or int(saved_steps) == steps or cfg.lr_scheduler == "constant":
        return None
    epochs, warmup = cfg.ppo_epochs, cfg.warmup_steps
    at = global_step * epochs
    before = cfg.lr * lr_factor(at, cfg.lr_scheduler, warmup, int(saved_steps) * epochs)
    after = cfg.lr * lr_factor(at, cfg.lr_scheduler, warmup, steps * epochs)
    return (
        f"the {cfg.lr_scheduler} LR schedule now ends at step {steps} (the checkpoint's run "
        f"had it end at step {saved_steps}): from step {global_step + 1} the lr follows the "
        f"{steps}-step schedule ({before:.3g} -> {after:.3g}); set trainer.lr_schedule_steps="
        f"{saved_steps} to keep the old end"
    )


def continue_schedule(scheduler: Any, base_lr: float) -> None:
    """Call after a ``LambdaLR``'s state (and its optimizer's) was loaded from a
    checkpoint: the next update's lr becomes ``base_lr * f(s)`` of the *current*
    schedule at the loaded update count ``s``. Without this the first update after a
    resume used the checkpoint's last lr (0.0 at the end of a decayed schedule) and
    the recipe's ``trainer.lr`` was ignored in favour of the checkpoint's."""
    scheduler.base_lrs = [float(base_lr)] * len(scheduler.base_lrs)
    step = int(scheduler.last_epoch)
    lrs = [b * fn(step) for b, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs
