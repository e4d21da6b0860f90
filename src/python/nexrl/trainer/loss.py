"""The trainer's loss path: rollout correction on the global batch, the policy-gradient
loss of a micro-batch.

``correct_rollout(batch, algo)`` (from ``SelfHostedGrpoTrainer.prepare_batch``,
after the old log-probs and advantages): the importance weights of
``algorithm.rollout_correction`` (``nexrl.trainer.algorithms.correction``) from the
trainer's ``old_log_probs`` and the rollout's ``behaviour_log_probs`` (the
pool's ``logprobs`` column), stored as ``rollout_is_weights``; ``mis`` also
takes masked tokens out of ``response_mask``. Returns the mismatch metrics
(every step, also with ``mode: none``).

``policy_gradient_loss(mb, log_probs, entropy, algo, ...)`` (from
``SelfHostedTrainer.compute_loss``, per micro-batch)::

    A'  = A * rollout_is_weights                    (when present)
    L   = POLICY_LOSSES[policy_loss](log_pi, old_log_pi, A', mask, loss_agg_mode,
                                     clip_ratio_low/high/c, max_ratio, loss_norm_length)
        + beta * agg(kl_penalty(log_pi, ref_log_pi))   if use_kl_loss
        - entropy_coeff * agg(H(pi))                   if entropy_coeff > 0

with ``algo`` resolved (``nexrl.trainer.algorithms.resolve_algorithm``): every field
the chosen functions take is passed by name, so a loss gets its own defaults
unless the recipe set the field.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import KL_PENALTIES, agg_loss, rollout_correction
from nexrl.trainer.algorithms.calls import call_policy_loss
from nexrl.trainer.errors import TrainerError

__all__ = ["correct_rollout", "policy_gradient_loss"]


def correct_rollout(batch: Batch, algo: AlgorithmConfig) -> dict[str, float]:
    """Rollout-correction weights into ``batch`` (in place) and the mismatch metrics."""
    rc = algo.rollout_correction
    if "behaviour_log_probs" not in batch:
        if rc.mode != "none":
            raise TrainerError(
                f"algorithm.rollout_correction.mode {rc.mode!r} needs the rollout's log-probs "
                "(batch 'behaviour_log_probs', from the pool's logprobs column)"
            )
        return {}
    mask = batch["response_mask"]
    weight, keep, metrics = rollout_correction(
        batch["old_log_probs"],
        batch["behaviour_log_probs"],
        mask,
        mode=rc.mode,
        level=rc.level,
        threshold=rc.threshold,
        threshold_low=rc.threshold_low,
    )
    if rc.mode != "none":
        batch["rollout_is_weights"] = weight.to(torch.float32)
        batch["response_mask"] = keep.to(mask.dtype)
    return metrics


def policy_gradient_loss(
    mb: Batch,
    log_probs: Tensor,
    entropy: Tensor | None,
    algo: AlgorithmConfig,
    *,
    kl_coef: float = 0.0,
    use_kl_loss: bool = False,
) -> tuple[Tensor, dict[str, Tensor | float]]:
    """The micro-batch's loss (a mean over its loss units) and metrics (module doc)."""
    for key in ("advantages", "old_log_probs", "response_mask"):
        if key not in mb:
            raise TrainerError(
                f"the batch has no {key!r}; compute it in prepare_batch "
                "(SelfHostedGrpoTrainer does) or override compute_loss"
            )
    mask = mb["response_mask"].bool()
    advantages = mb["advantages"]
    if "rollout_is_weights" in mb:
        advantages = advantages * mb["rollout_is_weights"].to(advantages.dtype)
    mode = algo.loss_agg_mode or "token-mean"
    loss, pm = call_policy_loss(algo, log_probs, mb["old_log_probs"], advantages, mask)
    metrics: dict[str, Tensor | float] = {"actor/pg_loss": loss.detach()}
    metrics.update({f"actor/{'pg_clipfrac' if k == 'clip_frac' else k}": v for k, v in pm.items()})
    norm = algo.loss_norm_length
    if use_kl_loss:
        if "ref_log_probs" not in mb:
            raise TrainerError("the KL loss needs 'ref_log_probs' in the batch")
        kl = KL_PENALTIES.get(algo.kl_penalty)(log_probs, mb["ref_log_probs"], mask)
        kl_loss = agg_loss(kl, mask, mode, norm_length=norm)
        loss = loss + kl_coef * kl_loss
        metrics["actor/kl_loss"] = kl_loss.detach()
    if entropy is not None:
        ent = agg_loss(entropy, mask, mode, norm_length=norm)
        metrics["actor/entropy"] = ent.detach()
        if algo.entropy_coeff > 0:
            loss = loss - algo.entropy_coeff * ent
    return loss, metrics
