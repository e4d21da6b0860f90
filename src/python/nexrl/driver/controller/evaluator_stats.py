"""The evaluator's numbers for one step's batch, and the failure policy.

``evaluator_metrics(cols)``: the mean of every evaluator metric (the pool's
metric columns, NaN where a trajectory has no value) over the batch, as
``eval/<name>``; ``eval/evaluator_error`` is the share of samples whose
evaluator raised. ``summary_metrics(summaries)``: the same means over the groups a
validation rolled out (``val/eval/<name>``). ``EvaluatorFailurePolicy`` tells the controller to stop the
run (it raises ``ControllerError``) when every sample of ``max_steps``
consecutive batches had an evaluator error, naming the evaluator, the
exception and the first failing row.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nexrl.core.types.episode import TRAJECTORY_METRICS
from nexrl.core.util.rows import row_text

__all__ = [
    "EVAL_PREFIX",
    "EvaluatorFailurePolicy",
    "evaluator_metrics",
    "first_error",
    "summary_metrics",
]

EVAL_PREFIX = "eval/"
ERROR_METRIC = "evaluator_error"


def evaluator_metrics(cols: Any) -> dict[str, float]:
    """``{"eval/<name>": mean}`` over the trajectories that report ``<name>``
    (the evaluator's metrics only: not the trajectory's own, ``TRAJECTORY_METRICS``)."""
    out: dict[str, float] = {}
    for name in sorted(set(cols.metrics) - set(TRAJECTORY_METRICS)):
        values = np.asarray(cols.metrics[name], dtype=np.float64)
        seen = ~np.isnan(values)
        if seen.any():
            out[EVAL_PREFIX + name] = float(values[seen].mean())
    return out


def summary_metrics(summaries: Any, prefix: str = "val/" + EVAL_PREFIX) -> dict[str, float]:
    """``{"val/eval/<name>": mean}`` over the samples of ``summaries`` (``GroupSummary``
    objects: each holds its group's mean of every metric), each group weighted by its
    number of samples; the evaluator's metrics only, as ``evaluator_metrics``."""
    totals: dict[str, list[float]] = {}
    for s in summaries:
        n = len(s.rewards)
        for name, value in s.metrics.items():
            if name in TRAJECTORY_METRICS or not n or not np.isfinite(value):
                continue
            acc = totals.setdefault(name, [0.0, 0.0])
            acc[0] += float(value) * n
            acc[1] += n
    return {prefix + name: total / n for name, (total, n) in sorted(totals.items()) if n}


def error_mask(cols: Any) -> np.ndarray:
    """Per trajectory: did its evaluator raise?"""
    values = cols.metrics.get(ERROR_METRIC)
    if values is None:
        return np.zeros(len(cols), dtype=bool)
    return np.nan_to_num(np.asarray(values, dtype=np.float64)) > 0


def first_error(cols: Any) -> tuple[str, str] | None:
    """(exception text, data row) of the first trajectory whose evaluator raised."""
    idx = np.flatnonzero(error_mask(cols))
    if not len(idx):
        return None
    meta = json.loads(cols.meta(int(idx[0])))
    error = str(meta.get("extra_info", {}).get(ERROR_METRIC, "unknown error"))
    return error, row_text(meta.get("data_item", {}))


class EvaluatorFailurePolicy:
    """Counts consecutive steps whose whole batch had evaluator errors."""

    def __init__(self, max_steps: int, evaluator: str) -> None:
        self.max_steps = max_steps
        self.evaluator = evaluator
        self.streak = 0
        self.steps = 0  # steps observed
        self.error_steps = 0  # steps whose every sample failed
        self.last: tuple[str, str] | None = None

    def observe(self, cols: Any) -> str | None:
        """Record one step's batch; the stop message once ``max_steps`` all-error
        steps came in a row, else None."""
        self.steps += 1
        mask = error_mask(cols)
        if len(mask) and mask.all():
            self.streak += 1
            self.error_steps += 1
            self.last = first_error(cols)
            if self.max_steps and self.streak >= self.max_steps:
                return self.message(self.streak)
        else:
            self.streak = 0
        return None

    def check_finished(self) -> str | None:
        """At the end of a run: the stop message when every step had only errors (a
        run that trained on nothing but errors never succeeds), else None."""
        if self.steps and self.error_steps == self.steps:
            return self.message(self.steps)
        return None

    def message(self, steps: int) -> str:
        error, row = self.last or ("unknown error", "{}")
        return (
            f"evaluator {self.evaluator} failed on every sample for {steps} consecutive "
            f"step(s) (rollout_worker.max_evaluator_error_steps={self.max_steps}): {error}; "
            f"first failing row: {row}"
        )
