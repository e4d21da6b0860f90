"""One training step of a trainer rank: prepare, update, count, publish, checkpoint.

One ``train_step(batch)`` (every rank gets the same global batch)::

    metrics  = stats of the batch as received (rewards, lengths, groups)
    batch, m = self.prepare_batch(batch)          # hook; on the global batch
    N        = loss units of the prepared batch    # tokens or sequences (agg mode)
    shard    = rows [r*n, (r+1)*n) of the batch padded to a multiple of W ranks
    for epoch in range(ppo_epochs):               # one optimizer step per pass
        for each micro-batch b of the shard:      # the last one sets the boundary
            L_b = self.compute_loss(b, log_probs, entropy)    # mean over b's n_b units
            backward(L_b * n_b / N * W)
        step()                                    # DeepSpeed averages over W ranks

so the gradient is that of the loss averaged over the *global* batch, whatever
the micro-batch size and world size: ``(1/W) sum_ranks sum_b L_b n_b W / N =
sum_b L_b n_b / N``. Every rank runs the same number of forwards (the shard
padding guarantees it), which ZeRO-3 collectives need.

An epoch whose loss is NaN/inf on any rank (or whose gradient norm is) applies
no update: the gradients are dropped (``engine.discard_gradients``), the step is
counted (``train/skipped_nonfinite``, ``train/skipped_nonfinite_total``) and the
run goes on; ``trainer.max_nonfinite_steps`` such steps in a row raise
``TrainerError`` (a run that only produces NaNs stops, it never "finishes").

``SelfHostedTrainer.step`` runs ``run_step``; the update itself is
``nexrl.trainer.update``'s, the snapshots and checkpoints ``nexrl.trainer.saving``'s.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Protocol

from nexrl.core.types.batch import Batch
from nexrl.trainer import saving
from nexrl.trainer.batch_io import BatchRef, load_batch
from nexrl.trainer.ops import loss_units
from nexrl.trainer.rank_state import TrainerRank
from nexrl.trainer.result import StepResult
from nexrl.trainer.step_metrics import input_metrics, stats, timed
from nexrl.trainer.update import count_nonfinite

__all__ = ["SteppingRank", "run_step"]


class SteppingRank(TrainerRank, Protocol):
    """What a step uses of a trainer rank besides ``TrainerRank`` (``SelfHostedTrainer``)."""

    kl_ctrl: Any
    defer_old_log_probs: bool

    def prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]: ...

    def _old_log_probs_from_update(self) -> bool: ...

    def _update(self, batch: Batch, units: int) -> dict[str, float]: ...

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> Path | None: ...


def run_step(t: SteppingRank, batch: Batch | BatchRef | str | Path) -> StepResult:
    """One update on the global ``batch`` (``SelfHostedTrainer.step``; see the module doc)."""
    start = time.perf_counter()
    if not isinstance(batch, Batch):
        batch = load_batch(batch)
    timings: dict[str, float] = {}
    metrics = input_metrics(batch)
    t.defer_old_log_probs = t._old_log_probs_from_update()
    try:
        with timed(timings, "prepare"):
            batch, prepared = t.prepare_batch(batch)
    finally:
        t.defer_old_log_probs = False
    metrics.update(prepared)
    units = loss_units(batch, t.loss_agg_mode) if len(batch) else 0
    updated = units > 0
    nonfinite = False
    if updated:
        with timed(timings, "update"):
            metrics.update(t._update(batch, units))
        nonfinite = metrics.pop("train/nonfinite_epochs", 0.0) > 0
        applied = metrics.pop("train/applied_epochs", 1.0) > 0
        updated = applied
        if applied:
            t.policy_version += 1
        kl = metrics.get("actor/reward_kl", metrics.get("actor/kl_loss"))
        if applied and kl is not None and math.isfinite(kl):
            t.kl_ctrl.update(kl, n_steps=len(batch))
    t.global_step += 1
    count_nonfinite(t, nonfinite, metrics)
    metrics["actor/update_skipped"] = 0.0 if updated else 1.0
    metrics["actor/kl_coef"] = float(t.kl_ctrl.value)
    if "advantages" in batch and len(batch):
        metrics.update(stats("critic/advantages", batch["advantages"], batch["response_mask"]))
    tokens = float(batch["attention_mask"].sum()) if len(batch) else 0.0
    compute = time.perf_counter() - start
    metrics["perf/tokens"] = tokens
    metrics["perf/tokens_per_s"] = tokens / compute if compute > 0 else 0.0
    published: int | None = None
    snapshot_path: str | None = None
    channel: dict[str, Any] | None = None
    if saving.snapshot_due(t, updated):
        with timed(timings, "snapshot"):
            snapshot_path, channel, handoff_metrics = saving.publish_for_step(t)
        metrics.update(handoff_metrics)
        published = t.policy_version
    if saving.checkpoint_due(t):
        with timed(timings, "checkpoint"):
            t.save_checkpoint()
    metrics.update({f"timing/{k}": v for k, v in timings.items()})
    metrics["timing/step"] = time.perf_counter() - start
    return StepResult(
        global_step=t.global_step,
        policy_version=t.policy_version,
        published_version=published,
        snapshot_path=snapshot_path,
        handoff=channel,
        metrics=metrics,
    )
