"""The update of one step, micro-batch by micro-batch, and the log-probs of a
global batch: what ``SelfHostedTrainer.step`` runs after ``prepare_batch``.

``update_policy(trainer, batch, units)`` (``units``: the loss units of the whole
prepared batch)::

    shard = rank r's n rows of the batch padded to a multiple of W ranks (contiguous;
            balanced by tokens when the step packs: ``ops.shares``)
    for epoch in range(ppo_epochs):                  # one optimizer step per pass
        for each micro-batch b of the shard:         # nexrl.trainer.microbatch; the
                                                     # last one sets the boundary
            log_probs, entropy = trainer.forward(b)
            L_b = trainer.compute_loss(b, log_probs, entropy)  # mean over b's n_b units
            backward(L_b * n_b / N * W)
        step(), or no update if L or the gradient norm is NaN/inf on any rank

``count_nonfinite`` keeps the count of steps skipped that way and stops the run
at ``trainer.max_nonfinite_steps`` in a row.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.engine import TrainingEngine
from nexrl.trainer.errors import TrainerError
from nexrl.trainer.microbatch import MicroBatch, micro_batch, rank_plan
from nexrl.trainer.ops import (
    loss_units,
    model_inputs,
    rank_share,
    response_log_probs,
    response_valid,
    unshare,
)
from nexrl.trainer.packing import packed_response_log_probs
from nexrl.trainer.rank_state import TrainerRank

__all__ = ["count_nonfinite", "global_log_probs", "update_policy"]

logger = logging.getLogger("nexrl.trainer.base")  # the trainer's log lines, as before


class _WeightedSums:
    """Metric sums weighted by each micro-batch's share of the loss units."""

    def __init__(self) -> None:
        self.sums: dict[str, float | Tensor] = {}

    def add(self, metrics: dict[str, Tensor | float], weight: float) -> None:
        for k, v in metrics.items():
            self.sums[k] = self.sums.get(k, 0.0) + v * weight

    def reduce(self, engine: TrainingEngine, divide: float) -> dict[str, float]:
        keys = sorted(self.sums)
        if not keys:
            return {}
        local = torch.tensor([float(self.sums[k]) for k in keys], dtype=torch.float64)
        total = engine.all_reduce_sum(local).cpu()
        return {k: float(v) / divide for k, v in zip(keys, total.tolist(), strict=True)}


def update_policy(t: TrainerRank, batch: Batch, units: int) -> dict[str, float]:
    """Train on this rank's shard of the prepared global ``batch`` (module doc); the
    metrics, with ``train/nonfinite_epochs`` and ``train/applied_epochs``."""
    shard, order = _shard(t, batch)
    plan = _plan(t, shard, equal_across_ranks=True)
    sums, norms, lrs = _WeightedSums(), [], []
    t.engine.train(True)
    applied = nonfinite = 0
    # pi_old = pi_theta before the update: with one epoch, the weights move only at
    # the last micro-batch's step, so each micro-batch's forward IS the old policy
    fill_old = "old_log_probs" not in batch and t.cfg.ppo_epochs == 1
    old = torch.zeros(len(shard), batch.response_width) if fill_old else None
    for epoch in range(t.cfg.ppo_epochs):
        lrs.append(t.engine.lr())
        finite = True
        for i, planned in enumerate(plan):
            t.engine.set_boundary(i == len(plan) - 1)
            mb = micro_batch(shard, planned).to(t.device)
            log_probs, entropy = t.forward(mb, entropy_grad=t.algo.entropy_coeff > 0)
            if old is not None:
                mb["old_log_probs"] = log_probs.detach()
                if epoch == 0 and not planned.filler:
                    lp = log_probs.detach().float().cpu()
                    old[planned.rows, : lp.shape[1]] = lp
            loss, m = t.compute_loss(mb, log_probs, entropy)
            finite = finite and bool(torch.isfinite(loss.detach()).all())
            share = loss_units(mb, t.loss_agg_mode) / units
            t.engine.backward(loss * (share * t.world_size))
            sums.add({**m, "actor/loss": loss.detach()}, share)
        bad = t.engine.all_reduce_sum(torch.tensor([0.0 if finite else 1.0]))
        if float(bad.sum()) > 0:  # every rank agrees: drop this epoch's gradients
            t.engine.discard_gradients()
            norms.append(math.nan)
        else:
            norms.append(t.engine.step())  # not finite: the engine applied nothing
        if not math.isfinite(norms[-1]):
            nonfinite += 1
            break  # the same batch again would not do better
        applied += 1
        t.optimizer_steps += 1
    out = sums.reduce(t.engine, divide=len(norms))
    if old is not None:
        full = unshare(t.engine.all_gather(old).cpu(), order, len(batch))
        batch["old_log_probs"] = torch.where(response_valid(batch), full, 0.0)
        out.update(t._after_old_log_probs(batch))
    out["actor/grad_norm"] = float(np.mean(norms))
    out["actor/lr"] = lrs[-1]
    out["perf/packed"] = float(t.packing)
    out["train/nonfinite_epochs"] = float(nonfinite)
    out["train/applied_epochs"] = float(applied)
    return out


def _plan(t: TrainerRank, shard: Batch, *, equal_across_ranks: bool) -> list[MicroBatch]:
    """This rank's micro-batches (``nexrl.trainer.microbatch.rank_plan``)."""
    return rank_plan(
        t.engine,
        shard,
        t.cfg.micro_batch_size,
        t.cfg.max_tokens_per_micro_batch,
        equal_across_ranks=equal_across_ranks,
    )


def count_nonfinite(t: TrainerRank, nonfinite: bool, metrics: dict[str, float]) -> None:
    """Count a step skipped for a NaN/inf loss (one warning line); raise at the
    ``trainer.max_nonfinite_steps``-th in a row."""
    t.nonfinite_streak = t.nonfinite_streak + 1 if nonfinite else 0
    t.nonfinite_total += int(nonfinite)
    metrics["train/skipped_nonfinite"] = float(nonfinite)
    metrics["train/skipped_nonfinite_total"] = float(t.nonfinite_total)
    if not nonfinite:
        return
    limit = int(t.cfg.max_nonfinite_steps)
    loss, norm = metrics.get("actor/loss", math.nan), metrics.get("actor/grad_norm", math.nan)
    if t.nonfinite_streak >= limit:
        raise TrainerError(
            f"step {t.global_step}: the loss or gradient norm was NaN/inf for "
            f"{t.nonfinite_streak} steps in a row (trainer.max_nonfinite_steps={limit}; "
            f"loss {loss}, grad norm {norm}); no update was applied for them. Look for "
            "NaN/inf rewards, advantages or log-probs in the batches, or lower trainer.lr"
        )
    if t.rank == 0:
        logger.warning(
            "step %d: the loss or gradient norm was NaN/inf (loss %s, grad norm %s); the "
            "update was skipped (%d in a row, %d in all; the run stops at "
            "trainer.max_nonfinite_steps=%d in a row)",
            t.global_step,
            loss,
            norm,
            t.nonfinite_streak,
            t.nonfinite_total,
            limit,
        )


@torch.no_grad()
def global_log_probs(t: TrainerRank, batch: Batch, reference: bool) -> Tensor:
    """``SelfHostedTrainer.compute_log_probs``: each rank's shard, all-gathered."""
    if reference and t.ref_model is None:
        raise TrainerError("reference log-probs asked for but no reference model is loaded")
    shard, order = _shard(t, batch)
    out = torch.zeros(len(shard), batch.response_width, dtype=torch.float32)
    t.engine.train(False)
    model: Any = t.ref_model if reference else t.engine.forward
    for planned in _plan(t, shard, equal_across_ranks=False):
        mb = micro_batch(shard, planned).to(t.device)
        if t.packing:
            lp, _ = packed_response_log_probs(model, mb, entropy_grad=None)
        else:
            logits = model(**model_inputs(mb)).logits
            lp, _ = response_log_probs(logits, mb.prompt_width, mb["responses"], entropy_grad=None)
        out[planned.rows, : lp.shape[1]] = lp.float().cpu()
    full = unshare(t.engine.all_gather(out).cpu(), order, len(batch))
    return torch.where(response_valid(batch), full, 0.0)


def _shard(t: TrainerRank, batch: Batch) -> tuple[Batch, Tensor]:
    """This rank's rows of ``batch`` and every rank's order (``ops.rank_share``): balanced
    by tokens when the step packs (a rank's cost is its tokens then), else contiguous."""
    return rank_share(batch, t.rank, t.world_size, by_tokens=t.packing)
