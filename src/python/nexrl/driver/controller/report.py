"""The step's metrics row: what was trained (rewards, policy versions), the run's
counters, the trainer's result, the dynamic-sampling (``filter/*``) and ``timing/*``
metrics; and the warning of a step whose update was skipped."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from nexrl.driver.controller.evaluator_stats import evaluator_metrics
from nexrl.driver.metrics.learning_signal import signal_metrics
from nexrl.driver.metrics.staleness import version_metrics

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.counters import RunCounters
    from nexrl.trainer.result import StepResult

__all__ = ["counter_metrics", "filter_row", "step_row", "timed", "warn_skipped_update"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name


def step_row(
    parts: Components,
    counters: RunCounters,
    batch: Any,
    trained: Any,
    result: StepResult,
    version: int,
    version_before: int,
) -> dict[str, Any]:
    """The step's metrics row: the pool batch, the columns trained (``trained``), the
    counters and the trainer's result (``version``: the policy it published)."""
    rewards = np.asarray(trained.reward, dtype=np.float64)
    versions = np.asarray(trained.policy_version)
    row: dict[str, Any] = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "version/trainer": version,
        "version/rollout_min": int(versions.min()),
        "version/rollout_max": int(versions.max()),
        "version/lag_max": int(version_before - versions.min()),  # the one lag metric
        **version_metrics(trained, version_before),
    }
    row.update(counter_metrics(parts, counters))
    row.update(batch.metrics())
    row.update(evaluator_metrics(trained))  # eval/<name>: mean over the step's batch
    row.update(signal_metrics(trained))  # is there anything to learn from?
    for k, v in result.row().items():
        row[f"timing/trainer_{k[7:]}" if k.startswith("timing/") else k] = v
    return row


def counter_metrics(parts: Components, counters: RunCounters) -> dict[str, Any]:
    """The run's counters so far (failures, restarts, retries, ...): in the step's row,
    and read again once the step's weight sync and validation are done (a server
    restarted while they ran is counted in that step's row, not the next one's)."""
    return {
        "rollout/failed_groups": counters.failed_groups,
        "rollout/evaluator_errors": counters.evaluator_errors,
        "rollout/rows_not_evaluated": counters.rows_not_evaluated,
        "data/bad_rows_skipped": parts.loader.stats()["bad_rows_skipped"],
        "rollout/groups_done": counters.groups_rolled_out,
        "pool/delivered_total": counters.delivered_trajectories,
        "inference/restarts": counters.inference_restarts,
        "rollout/retried_groups": counters.retried_groups,
        "rollout/retry_backoff_s": counters.retry_backoff_s,
        "cluster/workers_lost": counters.workers_lost,
        "rollout/stragglers_backed_up": counters.stragglers_backed_up,
        "rollout/duplicate_trajectories_dropped": _duplicates_dropped(parts, counters),
        "rollout/in_flight": parts.dispatcher.running_trajectories("train"),
    }


def _duplicates_dropped(parts: Components, counters: RunCounters) -> int:
    """Second copies of groups dropped so far: by the pool (before a batch is picked)
    and by the scheduler (a pool cursor written before the pool dropped them)."""
    pool = int(parts.pool.cursor.counters.get("duplicate_dropped_trajectories", 0))
    return pool + counters.duplicate_trajectories_dropped


def warn_skipped_update(
    parts: Components, row: dict[str, Any], step: int, max_nonfinite_steps: int
) -> None:
    """A warning for a step whose loss or gradient norm was not finite
    (``max_nonfinite_steps``: ``trainer.max_nonfinite_steps``)."""
    if row.get("train/skipped_nonfinite"):
        note = (
            f"step {step}: the loss or gradient norm was NaN/inf; its update was "
            f"skipped ({int(row.get('train/skipped_nonfinite_total', 0))} so far; "
            f"trainer.max_nonfinite_steps={max_nonfinite_steps} in a "
            "row stop the run)"
        )
        parts.progress.warn(note)


def filter_row(
    trained: Any,
    filtered: int,
    step: int,
    groups_per_batch: int,
    batch_size: int,
    max_extra_rounds: int,
) -> dict[str, float]:
    """Dynamic sampling metrics of one step: groups trained, groups filtered since
    the last batch, the extra rounds that took, and whether the batch is short
    (``batch_size``: ``trajectory_pool.batch_size``; ``max_extra_rounds``:
    ``algorithm.max_extra_sampling_rounds``)."""
    per_round = groups_per_batch
    short = len(trained) < batch_size
    kept = len(np.unique(np.asarray(trained.group_id)))
    if short:
        logger.warning(
            "dynamic sampling: step %d trains on %d informative groups (%d trajectories, "
            "batch_size %d): %d groups were filtered (algorithm.max_extra_sampling_rounds"
            "=%d)",
            step,
            kept,
            len(trained),
            batch_size,
            filtered,
            max_extra_rounds,
        )
    return {
        "filter/kept_groups": float(kept),
        "filter/dropped_groups": float(filtered),
        "filter/extra_rounds": float(-(-filtered // per_round)),
        "filter/short_batch": float(short),
    }


def waiting_line(
    step: int, waited: float, parts: Components, batch_size: int, filtered: int, timeout_s: float
) -> str:
    """The line for a step whose batch is long in coming (a slow or hung evaluator or
    server), so a stalled terminal says what it waits for and what ends it
    (``filtered``: groups dynamic sampling dropped meanwhile)."""
    stats = parts.pool.stats()
    sampling = (
        f", {filtered} groups filtered as zero-variance (dynamic sampling)"
        if parts.pool.config.filter_zero_variance
        else ""
    )
    return (
        f"step {step}: waiting {waited:.0f}s for a batch: "
        f"{parts.dispatcher.running_trajectories('train')} trajectories in flight, "
        f"{stats.ready} of {batch_size} ready in the pool{sampling}; a rollout or "
        "evaluator task running past runtime_monitor.task_timeout_s="
        f"{timeout_s:g} is cancelled and retried"
    )


def timed(row: dict[str, Any], t0: float, samples: int, end: float) -> None:
    """The step's total time and throughput, from ``t0`` to ``end``."""
    row["timing/step"] = end - t0
    row["perf/trajectories_per_s"] = samples / max(end - t0, 1e-9)
