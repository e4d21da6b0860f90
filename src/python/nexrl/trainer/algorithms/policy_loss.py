"""Policy-gradient losses (registered in ``POLICY_LOSSES``).

Every loss has the same call shape::

    fn(log_prob: Tensor[B, T],        # log pi_theta(y_t) of the sampled tokens (with grad)
       old_log_prob: Tensor[B, T],    # log pi_old(y_t), the behaviour policy
       advantages: Tensor[B, T],
       response_mask: Tensor[B, T],   # 1/True on tokens the policy produced
       loss_agg_mode: str = ...,      # nexrl.trainer.algorithms.aggregation (the loss's default)
       *, loss_norm_length=None,      # C of the constant-normaliser aggregation
       **options) -> (loss: Tensor[], metrics: dict[str, Tensor])

Each loss's keyword defaults (``loss_agg_mode``, clip bounds, ``max_ratio``) are
its own: a recipe field left null takes them (``nexrl.trainer.algorithms.defaults``).

Masked positions never reach the loss: their log-ratio and advantage are
replaced by 0 *before* any arithmetic (``torch.where``), so padding that holds
``-inf`` / NaN log-probs yields neither NaN losses nor NaN gradients.
Log-ratios are clamped to [-20, 20] before ``exp`` (as verl does).
Metrics are detached scalar tensors (no device sync), averaged over valid tokens:
``clip_frac``, ``approx_kl`` (``mean(old_log_prob - log_prob)``), ``ratio_mean``
and, for ``ppo_clip``, ``clip_frac_lower`` (dual-clip activations).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nexrl.trainer.algorithms.aggregation import agg_loss
from nexrl.trainer.algorithms.registry import POLICY_LOSSES

__all__ = ["gspo", "importance_sampling", "ppo_clip"]

_LOG_RATIO_BOUND = 20.0


def _masked_mean(values: Tensor, valid: Tensor) -> Tensor:
    return torch.where(valid, values, 0.0).sum() / valid.sum().clamp_min(1)


def _prepare(
    log_prob: Tensor, old_log_prob: Tensor, advantages: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(valid mask, clamped log-ratio with 0 on masked tokens, masked advantages)."""
    shape = log_prob.shape
    for name, tensor in (
        ("old_log_prob", old_log_prob),
        ("advantages", advantages),
        ("response_mask", response_mask),
    ):
        if tensor.shape != shape:
            raise ValueError(f"{name} shape {tuple(tensor.shape)} != log_prob {tuple(shape)}")
    valid = response_mask.bool()
    log_ratio = torch.where(valid, log_prob - old_log_prob.detach(), 0.0)
    log_ratio = log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    return valid, log_ratio, torch.where(valid, advantages.detach(), 0.0)


def _clip_bounds(low: float, high: float) -> tuple[float, float]:
    if not 0.0 <= low < 1.0:
        raise ValueError(f"clip_ratio_low must be in [0, 1), got {low!r}")
    if high < 0.0:
        raise ValueError(f"clip_ratio_high must be >= 0, got {high!r}")
    return 1.0 - low, 1.0 + high


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_norm_length: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with asymmetric bounds (DAPO clip-higher) and dual clip.

    ``rho_t = exp(log_prob - old_log_prob)``,
    ``L_t = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))``;
    with ``clip_ratio_c = c`` (> 1) and ``A < 0``: ``L_t = min(L_t, -A c)``
    (dual clip: bounds the loss of very large ratios on negative advantages).

    Sources: PPO, Schulman et al. 2017 (https://arxiv.org/abs/1707.06347), eq. 7;
    clip-higher, DAPO (Yu et al. 2025, https://arxiv.org/abs/2503.14476), sec. 3.1
    (``eps_high = 0.28``); dual clip, Ye et al. 2020 (https://arxiv.org/abs/1912.09729).
    Defaults: ``eps_low = eps_high = 0.2``, no dual clip, ``token-mean``.
    """
    lower, upper = _clip_bounds(clip_ratio_low, clip_ratio_high)
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c!r}")
    valid, log_ratio, adv = _prepare(log_prob, old_log_prob, advantages, response_mask)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(lower, upper)
    losses = torch.maximum(unclipped, clipped)
    metrics = {"clip_frac": _masked_mean((clipped > unclipped).to(ratio.dtype), valid)}
    if clip_ratio_c is not None:
        dual = -adv * clip_ratio_c
        negative = adv < 0
        lower_hit = negative & (losses > dual)
        losses = torch.where(negative, torch.minimum(losses, dual), losses)
        metrics["clip_frac_lower"] = _masked_mean(lower_hit.to(ratio.dtype), valid)
    else:
        metrics["clip_frac_lower"] = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    loss = agg_loss(losses, valid, loss_agg_mode, norm_length=loss_norm_length)
    metrics["approx_kl"] = _masked_mean(-log_ratio, valid)
    metrics["ratio_mean"] = _masked_mean(ratio, valid)
    return loss, {k: v.detach() for k, v in metrics.items()}


@POLICY_LOSSES.register("gspo")
def gspo(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    *,
    clip_ratio_low: float = 3e-4,
    clip_ratio_high: float = 4e-4,
    loss_norm_length: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: clipped surrogate on the sequence-level ratio.

    ``s_i = exp(1/|y_i| sum_t m (log_prob - old_log_prob))`` (mean over valid tokens),
    ``L_{i,t} = max(-A s_i, -A clip(s_i, 1 - eps_low, 1 + eps_high))``.
    Implemented in the GSPO-token form ``s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]``
    (same value as ``s_i``; gradient ``s_i * grad log pi(y_t)``), log-ratio capped
    at 10 as in verl. With ``seq-mean-token-mean`` (the default: the paper's
    ``1/G sum_i`` over sequences) the gradient equals the paper's sequence-level one.

    Source: Zheng et al. 2025, "Group Sequence Policy Optimization"
    (https://arxiv.org/abs/2507.18071), the GSPO objective and its GSPO-token
    variant; the paper's experiments clip at ``eps_low = 3e-4``, ``eps_high = 4e-4``:
    these are the defaults, with ``seq-mean-token-mean`` aggregation.
    """
    lower, upper = _clip_bounds(clip_ratio_low, clip_ratio_high)
    valid, log_ratio, adv = _prepare(log_prob, old_log_prob, advantages, response_mask)
    lengths = valid.sum(-1).clamp_min(1)
    seq_log_ratio = log_ratio.sum(-1) / lengths
    safe_log_prob = torch.where(valid, log_prob, 0.0)
    token_log_ratio = safe_log_prob - safe_log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(token_log_ratio.clamp(max=10.0))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(lower, upper)
    losses = torch.maximum(unclipped, clipped)
    loss = agg_loss(losses, valid, loss_agg_mode, norm_length=loss_norm_length)
    nonempty = valid.any(-1)
    metrics = {
        "clip_frac": _masked_mean((clipped > unclipped).to(ratio.dtype), valid),
        "approx_kl": _masked_mean(-log_ratio, valid),
        "ratio_mean": _masked_mean(torch.exp(seq_log_ratio.clamp(max=10.0)), nonempty),
    }
    return loss, {k: v.detach() for k, v in metrics.items()}


@POLICY_LOSSES.register("importance_sampling")
def importance_sampling(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    max_ratio: float | None = None,
    loss_norm_length: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Off-policy policy gradient with (optionally truncated) importance weights.

    ``w_t = rho_t`` or ``w_t = min(rho_t, max_ratio)``, ``rho_t = exp(log_prob - old_log_prob)``;
    ``L_t = -A w_t`` in value, with gradient ``-A w_t grad log_prob`` (computed as
    ``-A sg[w_t] exp(log_prob - sg[log_prob])``). Untruncated this is exactly the
    gradient of ``-A rho_t``; truncated tokens keep a gradient scaled by
    ``max_ratio`` (truncated IS as in ACER / V-trace) instead of losing it as a clip would.
    ``clip_frac`` reports the fraction of truncated tokens.

    Sources: the importance-sampled policy gradient (e.g. Degris et al. 2012,
    https://arxiv.org/abs/1205.4839); truncation as in ACER (Wang et al. 2016,
    https://arxiv.org/abs/1611.01224) and V-trace (Espeholt et al. 2018,
    https://arxiv.org/abs/1802.01561). Defaults: no truncation
    (``algorithm.max_ratio``), ``token-mean``.
    """
    if max_ratio is not None and max_ratio <= 0.0:
        raise ValueError(f"max_ratio must be > 0, got {max_ratio!r}")
    valid, log_ratio, adv = _prepare(log_prob, old_log_prob, advantages, response_mask)
    ratio = torch.exp(log_ratio)
    weight = ratio if max_ratio is None else ratio.clamp(max=max_ratio)
    safe_log_prob = torch.where(valid, log_prob, 0.0)
    score = torch.exp(safe_log_prob - safe_log_prob.detach())  # value 1, grad = grad log_prob
    losses = -adv * weight.detach() * score
    loss = agg_loss(losses, valid, loss_agg_mode, norm_length=loss_norm_length)
    truncated = ratio > max_ratio if max_ratio is not None else torch.zeros_like(valid)
    metrics = {
        "clip_frac": _masked_mean(truncated.to(ratio.dtype), valid),
        "approx_kl": _masked_mean(-log_ratio, valid),
        "ratio_mean": _masked_mean(ratio, valid),
    }
    return loss, {k: v.detach() for k, v in metrics.items()}
