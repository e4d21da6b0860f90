"""Advantage estimators (registered in ``ADVANTAGE_ESTIMATORS``).

Every estimator has the same call shape::

    fn(token_level_rewards: Tensor[B, T],   # rewards per response token
       response_mask: Tensor[B, T],         # 1/True on tokens the policy produced
       group_ids: Tensor[B],                # prompt group of each trajectory (uid)
       run_ids: Tensor[B] | None = None,    # episode of each trajectory (multi-turn)
       **options) -> (advantages: Tensor[B, T], returns: Tensor[B, T])

Outputs are zero on masked tokens and have the dtype of ``token_level_rewards``
(float32 when that is not floating point). Group ids and run ids may be any
dtype :func:`torch.unique` accepts (use :func:`group_ids_from_keys` for strings);
they are mapped to ``0..G-1`` with ``torch.unique(return_inverse=True)`` and all
per-group statistics are scatter/bincount reductions, so no estimator loops over
groups in Python. Statistics are computed in float64.

Outcome score of a trajectory: ``r_i = sum_t token_level_rewards[i, t]``
(:func:`token_level_from_scalar` puts a scalar reward on the last valid token).

Run ids (NexRL's multi-turn episodes): one episode may yield several
trajectories sharing a run id. Group statistics then weight *runs* equally:
``m_p`` is the mean score of run ``p``; a group's mean is the mean of its
``m_p`` and its std the std of its ``m_p``. Without run ids every trajectory
is its own run. A group with fewer than two runs, or whose run means are equal
(up to float64 round-off), carries no learning signal: its advantages are 0.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from nexrl.trainer.algorithms.registry import ADVANTAGE_ESTIMATORS, presets

__all__ = [
    "dr_grpo",
    "group_ids_from_keys",
    "grpo",
    "masked_whiten",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "rloo",
    "token_level_from_scalar",
]

# Run means whose spread is at most this fraction of their magnitude are equal.
_ZERO_SPREAD_RTOL = 1e-9


def token_level_from_scalar(rewards: Tensor, response_mask: Tensor) -> Tensor:
    """Place one scalar reward per sequence on its last valid response token.

    ``out[i, last_i] = rewards[i]`` where ``last_i`` is the largest ``t`` with
    ``response_mask[i, t]``; every other entry is 0. A row without any valid
    token keeps its reward in column 0, so ``out.sum(-1) == rewards`` always
    holds (its advantages are masked to 0 anyway).
    """
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be [B, T], got shape {tuple(response_mask.shape)}")
    batch, length = response_mask.shape
    if rewards.shape != (batch,):
        raise ValueError(f"rewards must be [B]={batch}, got shape {tuple(rewards.shape)}")
    if length == 0:
        raise ValueError("response_mask has no token positions (T == 0)")
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    positions = torch.arange(length, device=response_mask.device).expand(batch, length)
    last = torch.where(response_mask.bool(), positions, -1).amax(dim=-1).clamp_min(0)
    out = torch.zeros(batch, length, dtype=dtype, device=response_mask.device)
    return out.scatter_(1, last.unsqueeze(-1), rewards.to(dtype).unsqueeze(-1))


def group_ids_from_keys(
    keys: Sequence[Hashable], device: torch.device | str | None = None
) -> Tensor:
    """Integer group ids ``0..G-1`` (first-appearance order) for hashable keys."""
    index: dict[Hashable, int] = {}
    codes = [index.setdefault(key, len(index)) for key in keys]
    return torch.tensor(codes, dtype=torch.long, device=device)


# --------------------------------------------------------------------------- helpers


def _segment_sum(values: Tensor, index: Tensor, size: int) -> Tensor:
    return torch.zeros(size, dtype=values.dtype, device=values.device).index_add_(0, index, values)


@dataclass
class _GroupStats:
    """Per-trajectory views [B] of the (two-stage) group statistics (float64)."""

    scores: Tensor  # r_i
    mean: Tensor  # group mean of run means
    std: Tensor  # std of the group's run means (ddof as asked; 0 where undefined)
    run_mean: Tensor  # m_p of the trajectory's own run
    run_sum: Tensor  # sum of the group's run means
    num_runs: Tensor  # runs in the trajectory's group
    informative: Tensor  # >= 2 runs and run means not all equal


def _check_inputs(
    token_level_rewards: Tensor, response_mask: Tensor, group_ids: Tensor, run_ids: Tensor | None
) -> None:
    if token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards must be [B, T], got shape {tuple(token_level_rewards.shape)}"
        )
    if response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} != token_level_rewards shape "
            f"{tuple(token_level_rewards.shape)}"
        )
    batch = token_level_rewards.shape[0]
    if group_ids.shape != (batch,):
        raise ValueError(f"group_ids must be [B]={batch}, got shape {tuple(group_ids.shape)}")
    if run_ids is not None and run_ids.shape != (batch,):
        raise ValueError(f"run_ids must be [B]={batch}, got shape {tuple(run_ids.shape)}")


def _out_dtype(token_level_rewards: Tensor) -> torch.dtype:
    if token_level_rewards.is_floating_point():
        return token_level_rewards.dtype
    return torch.get_default_dtype()


def _finish(adv: Tensor, response_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """[B] or [B, T] float64 -> [B, T] ``dtype`` (finite), zero on masked tokens."""
    info = torch.finfo(dtype)
    adv = adv.clamp(info.min, info.max).to(dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    return adv * response_mask.to(dtype)


def _group_stats(
    scores: Tensor, group_ids: Tensor, run_ids: Tensor | None, std_ddof: int = 1
) -> _GroupStats:
    device = scores.device
    group_uniq, group = torch.unique(group_ids.to(device), return_inverse=True)
    num_groups = len(group_uniq)
    if run_ids is None:
        run, run_group, num_pairs = torch.arange(scores.numel(), device=device), group, len(scores)
    else:
        run_uniq, run_code = torch.unique(run_ids.to(device), return_inverse=True)
        pair_key = group * len(run_uniq) + run_code
        pair_uniq, run = torch.unique(pair_key, return_inverse=True)
        run_group, num_pairs = pair_uniq // len(run_uniq), len(pair_uniq)

    # stage 1: mean score of each (group, run)
    run_count = torch.bincount(run, minlength=num_pairs).to(scores.dtype)
    run_means = _segment_sum(scores, run, num_pairs) / run_count
    # stage 2: mean / std over the runs of each group
    runs_per_group = torch.bincount(run_group, minlength=num_groups)
    run_sum = _segment_sum(run_means, run_group, num_groups)
    group_mean = run_sum / runs_per_group.clamp_min(1)
    deviation = run_means - group_mean[run_group]
    sq_sum = _segment_sum(deviation.square(), run_group, num_groups)
    group_std = (sq_sum / (runs_per_group - std_ddof).clamp_min(1)).sqrt()
    scale = torch.zeros(num_groups, dtype=scores.dtype, device=device).scatter_reduce_(
        0, run_group, run_means.abs(), reduce="amax", include_self=True
    )
    spread = (sq_sum / runs_per_group.clamp_min(1)).sqrt()  # ddof-free spread
    informative = (runs_per_group >= 2) & (spread > _ZERO_SPREAD_RTOL * scale)
    return _GroupStats(
        scores=scores,
        mean=group_mean[group],
        std=torch.where(informative, group_std, 0.0)[group],
        run_mean=run_means[run],
        run_sum=run_sum[group],
        num_runs=runs_per_group[group],
        informative=informative[group],
    )


def masked_whiten(values: Tensor, valid: Tensor, eps: float = 1e-8) -> Tensor:
    """``(v - mean) / sqrt(var + eps)`` over all valid entries (unbiased var).

    Zero everywhere when fewer than two entries are valid or all are equal.
    """
    if values.numel() == 0:
        return torch.zeros_like(values)
    count = valid.sum()
    mean = torch.where(valid, values, 0.0).sum() / count.clamp_min(1)
    centered = torch.where(valid, values - mean, 0.0)
    var = centered.square().sum() / (count - 1).clamp_min(1)
    vmax = torch.where(valid, values, -math.inf).amax()
    vmin = torch.where(valid, values, math.inf).amin()
    degenerate = (count < 2) | (vmax <= vmin)
    return torch.where(degenerate, 0.0, centered / (var + eps).sqrt())


def _discounted_returns(rewards: Tensor, valid: Tensor, gamma: float) -> Tensor:
    """``G_t = r_t + gamma * G_next`` over valid tokens; masked tokens are skipped.

    Closed form per chunk: ``G_t = sum_{k >= t, valid} gamma^(c_k - c_t) r_k`` with
    ``c`` the running count of valid tokens; chunks are short enough for
    ``gamma^-c`` to stay finite in float64, and a carry joins them right to left.
    """
    r = torch.where(valid, rewards, 0.0)
    if gamma < 1e-100:  # gamma^1 * r is below float64 resolution: G_t = r_t
        return r
    if gamma == 1.0:
        return r.flip(-1).cumsum(-1).flip(-1)
    chunk = max(1, int(600.0 / -math.log(gamma)))
    out = torch.empty_like(r)
    carry = torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)  # G at first valid >= end
    length = r.shape[1]
    for end in range(length, 0, -chunk):
        start = max(0, end - chunk)
        count = valid[:, start:end].cumsum(-1).to(r.dtype)
        total = count[:, -1:]
        tail = (r[:, start:end] * gamma**count).flip(-1).cumsum(-1).flip(-1)
        out[:, start:end] = tail * gamma ** (-count) + carry.unsqueeze(-1) * gamma ** (
            total - count + 1
        )
        carry = tail[:, 0] / gamma + gamma ** total.squeeze(-1) * carry
    return torch.where(valid, out, 0.0)


# ------------------------------------------------------------------------ estimators


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    run_ids: Tensor | None = None,
    *,
    eps: float = 1e-6,
    norm_adv_by_std: bool = True,
    std_ddof: int = 1,
) -> tuple[Tensor, Tensor]:
    """Group-relative advantage (GRPO; Dr.GRPO with ``norm_adv_by_std=False``).

    ``A_i = (r_i - mean_g) / (std_g + eps)``, or ``A_i = r_i - mean_g`` without std
    normalisation, broadcast over the response tokens of ``i``. ``mean_g`` /
    ``std_g`` are over the group's run means (= the scores without run ids);
    ``std_g`` uses ``std_ddof`` (1: unbiased, like ``torch.std``; 0: population).
    ``A_i = 0`` for groups with < 2 runs (singletons, one shared run id) or with
    equal run means. Returns ``(advantages, advantages)``.

    Source: DeepSeekMath (Shao et al. 2024, https://arxiv.org/abs/2402.03300),
    outcome supervision. Defaults: ``norm_adv_by_std=True``, ``std_ddof=1``.
    """
    _check_inputs(token_level_rewards, response_mask, group_ids, run_ids)
    if std_ddof not in (0, 1):
        raise ValueError(f"std_ddof must be 0 or 1, got {std_ddof!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    dtype = _out_dtype(token_level_rewards)
    if token_level_rewards.shape[0] == 0:
        empty = torch.zeros_like(token_level_rewards, dtype=dtype)
        return empty, empty
    stats = _group_stats(
        token_level_rewards.sum(-1, dtype=torch.float64), group_ids, run_ids, std_ddof
    )
    adv = stats.scores - stats.mean
    if norm_adv_by_std:
        adv = adv / (stats.std + eps)
    adv = torch.where(stats.informative, adv, 0.0)
    out = _finish(adv, response_mask, dtype)
    return out, out


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
@presets(loss_agg_mode="seq-mean-token-sum-norm")
def dr_grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    run_ids: Tensor | None = None,
    *,
    norm_adv_by_std: bool = False,
    std_ddof: int = 1,
) -> tuple[Tensor, Tensor]:
    """Dr.GRPO ("GRPO done right"): ``A_i = r_i - mean_g``, no division by the group std.

    The same group statistics as :func:`grpo` (with ``norm_adv_by_std=False`` by
    default). Its other half is the loss aggregation: it presets
    ``loss_agg_mode: seq-mean-token-sum-norm`` (the constant normaliser ``C``,
    ``algorithm.loss_norm_length``, default the max response length) instead of
    dividing each sequence by its own length. A recipe that sets
    ``loss_agg_mode`` or ``norm_adv_by_std`` overrides either half.

    Source: Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
    Perspective" (https://arxiv.org/abs/2503.20783): both biases of GRPO, the std
    normalisation and the ``1/|o_i|`` length normalisation, removed.
    """
    return grpo(
        token_level_rewards,
        response_mask,
        group_ids,
        run_ids,
        norm_adv_by_std=norm_adv_by_std,
        std_ddof=std_ddof,
    )


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    run_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out: ``A_i = r_i - mean_{j != i, j in g} r_j``.

    Equivalently ``A_i = n/(n-1) * (r_i - mean_g)``. With run ids the left-out
    unit is the run: ``A_i = r_i - (sum_{q in g} m_q - m_{p(i)}) / (n_runs - 1)``.
    ``A_i = 0`` for groups with < 2 runs or equal run means.
    Returns ``(advantages, advantages)``.

    Source: Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!"
    (https://openreview.net/forum?id=r1lgTGL5DE); Ahmadian et al. 2024
    (https://arxiv.org/abs/2402.14740) for LLMs.
    """
    _check_inputs(token_level_rewards, response_mask, group_ids, run_ids)
    dtype = _out_dtype(token_level_rewards)
    if token_level_rewards.shape[0] == 0:
        empty = torch.zeros_like(token_level_rewards, dtype=dtype)
        return empty, empty
    stats = _group_stats(token_level_rewards.sum(-1, dtype=torch.float64), group_ids, run_ids)
    others = (stats.num_runs - 1).clamp_min(1).to(torch.float64)
    adv = stats.scores - (stats.run_sum - stats.run_mean) / others
    adv = torch.where(stats.informative, adv, 0.0)
    out = _finish(adv, response_mask, dtype)
    return out, out


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")
def reinforce_plus_plus(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    run_ids: Tensor | None = None,
    *,
    gamma: float = 1.0,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++: token-level discounted return, whitened over the batch.

    ``G_t = r_t + gamma * G_{t'}`` (``t'`` the next *valid* token; masked tokens
    neither discount nor cut the return), then
    ``A_t = (G_t - mean(G)) / sqrt(var(G) + eps)`` with mean / unbiased var over
    all valid tokens of the batch. Groups are not used. Returns ``(A, G)``.

    Source: Hu 2025, "REINFORCE++" (https://arxiv.org/abs/2501.03262).
    Defaults: ``gamma=1``.
    """
    _check_inputs(token_level_rewards, response_mask, group_ids, run_ids)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    dtype = _out_dtype(token_level_rewards)
    valid = response_mask.bool()
    returns = _discounted_returns(token_level_rewards.to(torch.float64), valid, gamma)
    adv = masked_whiten(returns, valid, eps)
    return _finish(adv, response_mask, dtype), _finish(returns, response_mask, dtype)


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    run_ids: Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ with a group baseline, whitened over the batch.

    ``b_i = r_i - mean_g`` (0 for groups with < 2 runs or equal run means),
    broadcast over the valid tokens of ``i``; then
    ``A = (b - mean(b)) / sqrt(var(b) + eps)`` over all valid tokens of the batch.
    Returns ``(A, A)``.

    Source: Hu 2025, "REINFORCE++" (https://arxiv.org/abs/2501.03262), the
    group-baseline variant (as in verl's ``reinforce_plus_plus_baseline``).
    """
    _check_inputs(token_level_rewards, response_mask, group_ids, run_ids)
    dtype = _out_dtype(token_level_rewards)
    if token_level_rewards.shape[0] == 0:
        empty = torch.zeros_like(token_level_rewards, dtype=dtype)
        return empty, empty
    stats = _group_stats(token_level_rewards.sum(-1, dtype=torch.float64), group_ids, run_ids)
    centered = torch.where(stats.informative, stats.scores - stats.mean, 0.0)
    valid = response_mask.bool()
    tokens = centered.unsqueeze(-1).expand_as(valid)
    out = _finish(masked_whiten(tokens, valid, eps), response_mask, dtype)
    return out, out
