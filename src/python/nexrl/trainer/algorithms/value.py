"""Critic-based pieces: GAE and n-step advantage estimators (registered in
``ADVANTAGE_ESTIMATORS``), the clipped value loss and explained variance.

The estimators take the critic's values as well as the common arguments::

    fn(token_level_rewards [B, T], response_mask [B, T], group_ids [B], run_ids,
       values [B, T], gamma, lam | n_step) -> (advantages [B, T], returns [B, T])

``values[b, t]`` is V(s_t), the critic's value of the state *before* response token
``t`` (the prefix up to ``t - 1``). Tokens outside ``response_mask`` (padding, and a
multi-turn episode's tool/user tokens) are skipped as verl's mask-aware GAE skips
them: the recursion runs over the trajectory's policy tokens only, in order, as if
the others were not there. So each row is first *compacted* (its ``k``-th policy
token moved to column ``k``, :func:`_compact`), the recursion is a matrix product
with a discount matrix (no Python loop over tokens or rows), and the result is
scattered back. Outputs are 0 on masked tokens; computed in float64.

An estimator that takes ``values`` needs a value model: the trainer
``self_hosted_ppo`` trains one (``nexrl.trainer.critic``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nexrl.trainer.algorithms.advantages import masked_whiten
from nexrl.trainer.algorithms.registry import ADVANTAGE_ESTIMATORS

_WHITEN_EPS = 1e-8  # verl's masked_whiten

__all__ = [
    "clipped_value_loss",
    "estimator_takes_values",
    "explained_variance",
    "gae",
    "nstep",
]


def estimator_takes_values(fn: object) -> bool:
    """Whether an advantage estimator needs the critic's values (a ``values`` parameter)."""
    import inspect

    try:
        return "values" in inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _compact(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(xc [B, T], k [B, T])``: row ``b``'s ``k``-th masked-in entry moved to column
    ``k`` (0 past its count); ``k`` is each token's column in ``xc`` (-1 when masked)."""
    k = torch.where(mask, mask.long().cumsum(-1) - 1, -1)
    out = torch.zeros_like(x)
    rows = torch.arange(x.shape[0], device=x.device).unsqueeze(-1).expand_as(k)
    out[rows[mask], k[mask]] = x[mask]
    return out, k


def _expand(xc: Tensor, k: Tensor) -> Tensor:
    """Inverse of :func:`_compact`: column ``k[b, t]`` of ``xc`` back at ``t`` (0 where masked)."""
    return xc.gather(-1, k.clamp_min(0)) * (k >= 0)


def _discount_matrix(length: int, base: float, band: int | None, device: torch.device) -> Tensor:
    """``D[j, k] = base**(j - k)`` for ``k <= j < k + band`` (all ``j >= k`` when
    ``band`` is None), else 0; float64. ``(x @ D)[k] = sum_j base**(j-k) x[j]``."""
    idx = torch.arange(length, device=device)
    gap = idx.unsqueeze(-1) - idx.unsqueeze(0)  # [j, k] = j - k
    keep = gap >= 0
    if band is not None:
        keep &= gap < band
    power = torch.pow(torch.tensor(base, dtype=torch.float64, device=device), gap.clamp_min(0))
    return torch.where(keep, power, torch.zeros((), dtype=torch.float64, device=device))


def _prepared(
    token_level_rewards: Tensor, response_mask: Tensor, values: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, torch.dtype]:
    if values is None:
        raise ValueError(
            "this advantage estimator needs the critic's values; train with "
            "trainer.type: self_hosted_ppo (it builds a value model)"
        )
    if values.shape != token_level_rewards.shape or response_mask.shape != values.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, token_level_rewards "
            f"{tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same [B, T] shape"
        )
    mask = response_mask.bool()
    dtype = (
        token_level_rewards.dtype
        if token_level_rewards.is_floating_point()
        else torch.get_default_dtype()
    )
    rc, k = _compact(token_level_rewards.double(), mask)
    vc, _ = _compact(values.double(), mask)
    return rc, vc, k, mask, dtype


@ADVANTAGE_ESTIMATORS.register("gae")
def gae(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor | None = None,
    run_ids: Tensor | None = None,
    *,
    values: Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), as
    verl's ``compute_gae_advantage_return`` (mask-aware: only policy tokens count)::

        delta_k = r_k + gamma * V_{k+1} - V_k           (V past the last token = 0)
        A_k     = sum_{j >= k} (gamma * lam)^(j - k) * delta_j
        R_k     = A_k + V_k                             (the critic's target)
        A       = masked_whiten(A)                      (batch mean 0, std 1)

    over each trajectory's policy tokens ``k`` (module doc). ``group_ids`` and
    ``run_ids`` are not used: the baseline is the critic's value, not the group."""
    rc, vc, k, mask, dtype = _prepared(token_level_rewards, response_mask, values)
    next_v = torch.nn.functional.pad(vc[:, 1:], (0, 1))
    delta = rc + gamma * next_v - vc
    adv_c = delta @ _discount_matrix(delta.shape[1], gamma * lam, None, delta.device)
    advantages, returns = _expand(adv_c, k), _expand(adv_c + vc, k)
    return masked_whiten(advantages, mask, _WHITEN_EPS).to(dtype), returns.to(dtype)


@ADVANTAGE_ESTIMATORS.register("nstep")
def nstep(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor | None = None,
    run_ids: Tensor | None = None,
    *,
    values: Tensor | None = None,
    gamma: float = 1.0,
    n_step: int = 8,
) -> tuple[Tensor, Tensor]:
    """n-step TD returns (Sutton & Barto, *Reinforcement Learning*, 2nd ed., sec. 7.1;
    the NexRL custom-trainer guide's "n-step returns" pattern)::

        G_k = sum_{j=k}^{k+n-1} gamma^(j - k) * r_j + gamma^n * V_{k+n}   (V past the end = 0)
        A_k = G_k - V_k;   returns = G;   A = masked_whiten(A)

    over each trajectory's policy tokens (module doc). ``n_step = 1`` is TD(0), equal
    to ``gae`` with ``lam = 0``; ``n_step`` at least the response length is the Monte
    Carlo return, equal to ``gae`` with ``lam = 1``."""
    if n_step < 1:
        raise ValueError(f"algorithm.n_step must be >= 1, got {n_step}")
    rc, vc, k, mask, dtype = _prepared(token_level_rewards, response_mask, values)
    length = rc.shape[1]
    g = rc @ _discount_matrix(length, gamma, n_step, rc.device)
    g = g + (gamma**n_step) * torch.nn.functional.pad(vc[:, n_step:], (0, min(n_step, length)))
    returns = _expand(g, k)
    advantages = returns - _expand(vc, k)
    return masked_whiten(advantages, mask, _WHITEN_EPS).to(dtype), returns.to(dtype)


def clipped_value_loss(
    vpreds: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    cliprange_value: float,
) -> tuple[Tensor, Tensor]:
    """PPO's clipped value loss per token and whether the clipped term was chosen
    (verl ``compute_value_loss``; OpenAI baselines ppo2)::

        v_clip = old + clamp(vpred - old, -c, c)
        loss_t = 0.5 * max((vpred - R)^2, (v_clip - R)^2)
        clipped_t = (v_clip - R)^2 > (vpred - R)^2

    ``[B, T]`` each, 0 / False on masked tokens (aggregate with ``agg_loss``)."""
    clipped = old_values + (vpreds - old_values).clamp(-cliprange_value, cliprange_value)
    plain = (vpreds - returns) ** 2
    other = (clipped - returns) ** 2
    m = mask.bool()
    loss = 0.5 * torch.maximum(plain, other) * m.to(vpreds.dtype)
    return loss, (other > plain) & m


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over the masked-in tokens: 1 = the critic predicts
    the returns, 0 = no better than their mean, < 0 = worse (verl's
    ``critic/vf_explained_var``). NaN when the returns do not vary."""
    m = mask.bool()
    if int(m.sum()) < 2:
        return float("nan")
    r, v = returns[m].double(), values[m].double()
    var_r = r.var(unbiased=False)
    if float(var_r) == 0.0:
        return float("nan")
    return float(1.0 - (r - v).var(unbiased=False) / var_r)
