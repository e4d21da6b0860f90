"""Rollout correction: importance weights for the inference/trainer mismatch
(``ROLLOUT_CORRECTIONS``), and the mismatch metrics.

The rollout's tokens were sampled by the inference engine, whose log-probs
``log mu(y_t)`` (the pool's ``logprobs`` column, the batch's
``behaviour_log_probs``) differ from the trainer's ``log pi_old(y_t)``
(``old_log_probs``, recomputed before the update) through kernels, precision
and, in the async modes, staleness. With ``d_t = log pi_old(y_t) - log mu(y_t)``
on valid tokens the importance ratio is

- ``level: token``:    ``rho_t = exp(d_t)``
- ``level: sequence``: ``rho_t = rho_i = exp(sum_t d_t)`` on every token of sequence ``i``

(exponents clamped to [-20, 20]). A mode turns ``rho`` into a weight ``w`` and a
keep mask; the trainer multiplies each token's policy loss by ``w`` (as a
factor of the advantage: every policy loss is positively homogeneous in it)
and trains only on kept tokens:

- ``tis`` (truncated IS): ``w = min(rho, threshold)``, every token kept.
- ``mis`` (masked IS): ``w = rho``; tokens (token level) or whole sequences
  (sequence level) with ``rho > threshold`` (or ``rho < threshold_low`` when
  set) are masked out of the loss (they leave the response mask, so they are
  not loss units either).

Sources: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training" (https://fengyao.notion.site/off-policy-rl, token-level
TIS); Liu, Li et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse
from the Training-Inference Mismatch" (blog, https://yingru.notion.site; sequence-level
IS and MIS); verl's rollout-correction options follow the same scheme.

Mismatch metrics (:func:`mismatch_metrics`), over the valid tokens of the batch:

- ``rollout_corr/kl_k1``  = ``mean(log mu - log pi_old)``: k1 estimate of ``KL(mu || pi_old)``
- ``rollout_corr/kl_k3``  = ``mean(exp(d) - d - 1)``: k3 estimate of the same KL (>= 0)
- ``rollout_corr/rollout_ppl`` = ``exp(-mean(log mu))``,
  ``rollout_corr/trainer_ppl`` = ``exp(-mean(log pi_old))`` and
  ``rollout_corr/ppl_ratio`` = ``trainer_ppl / rollout_ppl``
- ``rollout_corr/weight_mean`` = mean of ``w`` over the valid tokens (1 without a mode),
  ``rollout_corr/clipped_frac`` (``tis``: tokens whose weight was truncated) and
  ``rollout_corr/masked_frac`` (``mis``: tokens masked out), shares of the valid tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from nexrl.core.plugins.registry import Registry

__all__ = [
    "ROLLOUT_CORRECTIONS",
    "correction_ratio",
    "masked_is",
    "mismatch_metrics",
    "rollout_correction",
    "truncated_is",
]

_BOUND = 20.0

# fn(ratio [B, T], valid [B, T] bool, *, threshold, threshold_low)
#   -> (weight [B, T], corrected [B, T] bool: truncated or masked, keep [B, T] bool)
CorrectionFn = Callable[..., tuple[Tensor, Tensor, Tensor]]
ROLLOUT_CORRECTIONS: Registry[CorrectionFn] = Registry("rollout correction mode")


def correction_ratio(
    old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor, level: str
) -> Tensor:
    """``rho [B, T]`` of the module doc (1 on invalid tokens)."""
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"old_log_prob {tuple(old_log_prob.shape)}, rollout_log_prob "
            f"{tuple(rollout_log_prob.shape)} and response_mask {tuple(response_mask.shape)} differ"
        )
    valid = response_mask.bool()
    d = torch.where(valid, old_log_prob.detach() - rollout_log_prob.detach(), 0.0)
    if level == "sequence":
        d = d.sum(-1, keepdim=True).expand_as(d)
    elif level != "token":
        raise ValueError(f"rollout correction level must be 'token' or 'sequence', got {level!r}")
    return torch.where(valid, torch.exp(d.clamp(-_BOUND, _BOUND)), 1.0)


@ROLLOUT_CORRECTIONS.register("tis")
def truncated_is(
    ratio: Tensor, valid: Tensor, *, threshold: float, threshold_low: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """TIS: ``w = min(rho, threshold)``; nothing masked (``threshold_low`` unused)."""
    corrected = valid & (ratio > threshold)
    return ratio.clamp(max=threshold), corrected, valid


@ROLLOUT_CORRECTIONS.register("mis")
def masked_is(
    ratio: Tensor, valid: Tensor, *, threshold: float, threshold_low: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """MIS: ``w = rho``, tokens with ``rho > threshold`` (or ``< threshold_low``) masked."""
    out = ratio > threshold
    if threshold_low is not None:
        out = out | (ratio < threshold_low)
    corrected = valid & out
    return torch.where(corrected, 0.0, ratio), corrected, valid & ~out


def rollout_correction(
    old_log_prob: Tensor,
    rollout_log_prob: Tensor,
    response_mask: Tensor,
    *,
    mode: str,
    level: str = "token",
    threshold: float = 2.0,
    threshold_low: float | None = None,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """``(weight [B, T], keep [B, T] bool, metrics)``; ``mode`` 'none' or registered.

    With ``mode: none`` the weight is 1 and every valid token is kept; the
    mismatch metrics are reported either way (see the module doc).
    """
    if not threshold > 0:
        raise ValueError(f"rollout correction threshold must be > 0, got {threshold!r}")
    valid = response_mask.bool()
    ratio = correction_ratio(old_log_prob, rollout_log_prob, response_mask, level)
    if mode == "none":
        weight, corrected, keep = torch.ones_like(ratio), torch.zeros_like(valid), valid
    else:
        fn = ROLLOUT_CORRECTIONS.get(mode)
        weight, corrected, keep = fn(ratio, valid, threshold=threshold, threshold_low=threshold_low)
    weight = torch.where(valid, weight, 0.0)
    metrics = mismatch_metrics(old_log_prob, rollout_log_prob, response_mask)
    n = valid.sum().clamp_min(1)
    share = float(corrected.sum() / n)
    metrics["rollout_corr/weight_mean"] = float(weight.sum() / n)
    metrics["rollout_corr/clipped_frac"] = share if mode == "tis" else 0.0
    metrics["rollout_corr/masked_frac"] = share if mode == "mis" else 0.0
    return weight, keep, metrics


def mismatch_metrics(
    old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor
) -> dict[str, float]:
    """k1 / k3 KL and perplexities of rollout vs trainer log-probs (module doc)."""
    valid = response_mask.bool()
    n = valid.sum().clamp_min(1)
    old = torch.where(valid, old_log_prob.detach().double(), 0.0)
    rollout = torch.where(valid, rollout_log_prob.detach().double(), 0.0)
    d = (old - rollout).clamp(-_BOUND, _BOUND)
    k3 = torch.where(valid, torch.exp(d) - d - 1.0, 0.0)
    rollout_ppl = float(torch.exp(-rollout.sum() / n))
    trainer_ppl = float(torch.exp(-old.sum() / n))
    return {
        "rollout_corr/kl_k1": float((rollout - old).sum() / n),
        "rollout_corr/kl_k3": float(k3.sum() / n),
        "rollout_corr/rollout_ppl": rollout_ppl,
        "rollout_corr/trainer_ppl": trainer_ppl,
        "rollout_corr/ppl_ratio": trainer_ppl / rollout_ppl,
    }
