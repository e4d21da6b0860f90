"""Validation: the held-out prompts rolled out on the current policy (at
``validate.temperature``), their mean reward logged as ``val/*``, and the mean of
every metric the evaluator returned as ``val/eval/<name>`` (as ``eval/<name>`` of
a training step)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from nexrl.driver.controller.evaluator_stats import summary_metrics

if TYPE_CHECKING:
    from nexrl.core.config.sections.runtime import ValidateConfig
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.harvest import HarvestRecorder

__all__ = ["VAL_ITEMS_PER_TASK", "validate"]

VAL_ITEMS_PER_TASK = 16


def validate(
    parts: Components,
    settings: ValidateConfig,
    step: int,
    harvest: HarvestRecorder,
    service: Callable[[], None],
) -> dict[str, float]:
    """Roll out the validation prompts (at ``settings.temperature``, the ``validate``
    section's) and wait for them (``service``: what the loop does meanwhile); the ``val/*`` metrics, and one line on the terminal."""
    t = time.perf_counter()
    spec = parts.dispatcher.spec.with_sampling(temperature=settings.temperature)
    items = [i for g in parts.val_groups for i in g]
    for k in range(0, len(items), VAL_ITEMS_PER_TASK):  # few futures: less overhead
        parts.dispatcher.submit(
            items[k : k + VAL_ITEMS_PER_TASK], commit=False, spec=spec, tag="val"
        )
    harvest.val_summaries = []
    harvest.val_failed_prompts = 0
    while parts.dispatcher.running("val"):
        parts.dispatcher.wait_any(0.2)
        service()
    summaries = harvest.val_summaries
    rewards = [r for s in summaries for r in s.rewards]
    errors = sum(s.evaluator_errors for s in summaries)
    failed = harvest.val_failed_prompts
    out = {
        "val/reward/mean": float(np.mean(rewards)) if rewards else float("nan"),
        "val/num_samples": float(len(rewards)),
        "val/evaluator_errors": float(errors),
        "val/failed_groups": failed,
        "val/time_s": time.perf_counter() - t,
        **summary_metrics(summaries),
    }
    problems = [f"{errors} evaluator errors, scored 0"] if errors else []
    problems += [f"{failed} prompts failed" if failed > 1 else "1 prompt failed"] if failed else []
    seen = f"; {', '.join(problems)}: see logs/dask-worker-*.log" if problems else ""
    parts.progress.write(
        f"validation at step {step}: reward {out['val/reward/mean']:.3f} "
        f"({len(rewards)} samples{seen})"
    )
    return out
