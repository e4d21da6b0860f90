"""Learning-rate schedules (``trainer.lr_scheduler``) as a multiplier of ``trainer.lr``.

For the ``s``-th optimizer update (``s = 0, 1, ...``), ``W`` warm-up steps and
``T`` total updates::

    warm-up (s < W):  f(s) = (s + 1) / W
    then p = min(1, (s - W) / max(1, T - W)) and
      constant:       f(s) = 1
      linear:         f(s) = 1 - p
      cosine:         f(s) = (1 + cos(pi p)) / 2

The same function drives the DeepSpeed backend (as a ``LambdaLR``) and the
plain-PyTorch baseline of the benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["SCHEDULES", "lr_factor", "lr_lambda"]

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
