"""Weight sync at a step that published a snapshot: inference reloads it, or copies
the step's weights from the trainer's channel (``weight.handoff``:
``nexrl.driver.controller.handoff``); how the sync modes differ: ``nexrl.driver.controller.sync``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from nexrl.driver.controller.errors import ControllerError

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.harvest import HarvestRecorder
    from nexrl.driver.controller.watch import ClusterWatch
    from nexrl.trainer.result import StepResult

__all__ = ["WeightSyncError", "sync_weights"]


class WeightSyncError(ControllerError):
    """Inference could not take a trained step's weights (a reload refused, a restart
    that failed): the step itself trained, so the loop checkpoints it before stopping."""


def sync_weights(
    parts: Components,
    result: StepResult,
    step: int,
    version: int,
    harvest: HarvestRecorder,
    watch: ClusterWatch,
    task_timeout_s: float,
) -> dict[str, float]:
    """Inference onto the step's weights: from the trainer's channel, or the snapshot the
    step published (its path comes with the step's result: nothing is looked up on
    disk); the step's ``weight``/``timing`` metrics (``timing/reload``: the server's copy
    or reload, ``weight/handoff_memory``: 1 when it came from memory)."""
    if result.snapshot_path is None or result.published_version != version:
        raise ControllerError(
            f"trainer published snapshot v{result.published_version} at step {step} "
            f"but reported {result.snapshot_path or 'no path'} (policy v{version})"
        )
    out: dict[str, float] = {}
    if parts.sync_policy.drain_before_reload:
        t = time.perf_counter()
        harvest.record(parts.dispatcher.drain(task_timeout_s), parts)
        out["timing/drain"] = time.perf_counter() - t
    out["weight/in_flight_at_reload"] = float(parts.dispatcher.running_trajectories("train"))
    parts.pool.begin_weight_sync(version)
    try:  # in memory when the run hands over that way (weight.handoff), else the snapshot
        seconds, memory = parts.handoff.sync(parts.supervisor, parts.trainer, result)
    except Exception as exc:
        raise WeightSyncError(f"inference: {exc}") from exc
    out["timing/reload"] = seconds
    out["weight/handoff_memory"] = 1.0 if memory else 0.0
    watch.follow_inference_restarts(parts)  # a hung server is replaced by the reload
    parts.pool.end_weight_sync(version)
    out["version/inference"] = float(version)
    return out
