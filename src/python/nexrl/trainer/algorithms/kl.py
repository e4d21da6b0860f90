"""KL penalties (``KL_PENALTIES``), KL coefficient controllers (``KL_CONTROLLERS``)
and the entropy of a categorical distribution given by logits.

Penalties are per-token estimates of ``KL(pi_theta || pi_ref)`` from the log-probs
of the sampled tokens: ``fn(log_prob [B, T], ref_log_prob [B, T],
response_mask [B, T] | None = None) -> [B, T]``. With a mask, masked positions
are exactly 0 (``torch.where`` before any arithmetic, so ``-inf`` padding is safe).

Controllers hold the KL coefficient ``value`` and adapt it with
``update(current_kl, n_steps)``; ``state_dict()`` / ``load_state_dict()`` let a
checkpoint carry the coefficient across restarts.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from nexrl.trainer.algorithms.registry import KL_CONTROLLERS, KL_PENALTIES

__all__ = [
    "AdaptiveKLController",
    "FixedKLController",
    "entropy_from_logits",
    "kl_abs",
    "kl_k1",
    "kl_low_var",
    "kl_mse",
]


def _diff(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor | None) -> Tensor:
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"ref_log_prob shape {tuple(ref_log_prob.shape)} != log_prob {tuple(log_prob.shape)}"
        )
    diff = log_prob - ref_log_prob
    if response_mask is None:
        return diff
    if response_mask.shape != log_prob.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} != log_prob {tuple(log_prob.shape)}"
        )
    return torch.where(response_mask.bool(), diff, 0.0)


def kl_k1(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor | None = None) -> Tensor:
    """k1 estimator: ``log_prob - ref_log_prob`` (unbiased, high variance, can be < 0)."""
    return _diff(log_prob, ref_log_prob, response_mask)


def kl_abs(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor | None = None) -> Tensor:
    """``|log_prob - ref_log_prob|``."""
    return _diff(log_prob, ref_log_prob, response_mask).abs()


def kl_mse(log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor | None = None) -> Tensor:
    """k2 estimator: ``0.5 * (log_prob - ref_log_prob)^2`` (capped at the dtype's max)."""
    squared = 0.5 * _diff(log_prob, ref_log_prob, response_mask).square()
    return squared.clamp(max=torch.finfo(squared.dtype).max)


def kl_low_var(
    log_prob: Tensor, ref_log_prob: Tensor, response_mask: Tensor | None = None
) -> Tensor:
    """k3 estimator (Schulman): ``exp(d) - d - 1`` with ``d = ref_log_prob - log_prob``.

    ``d`` is clamped to [-20, 20] and the result to [-10, 10], as in verl. Always >= 0.
    """
    d = (-_diff(log_prob, ref_log_prob, response_mask)).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


for _name, _fn in (
    ("kl", kl_k1),
    ("k1", kl_k1),
    ("abs", kl_abs),
    ("mse", kl_mse),
    ("k2", kl_mse),
    ("low_var_kl", kl_low_var),
    ("k3", kl_low_var),
):
    KL_PENALTIES.register(_name)(_fn)


# ----------------------------------------------------------------------- controllers


def _check_coef(value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"KL coefficient must be finite and >= 0, got {value!r}")
    return value


class _KLController(ABC):
    kind = ""

    def __init__(self, kl_coef: float) -> None:
        self.value = _check_coef(kl_coef)

    @abstractmethod
    def update(self, current_kl: float | Tensor, n_steps: int) -> None:
        """Adjust ``value`` after ``n_steps`` steps that measured ``current_kl``."""

    def state_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        kind = state.get("type", self.kind)
        if kind != self.kind:
            raise ValueError(f"state is for a {kind!r} KL controller, not {self.kind!r}")
        self.value = _check_coef(state["value"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.value!r})"


@KL_CONTROLLERS.register("fixed")
class FixedKLController(_KLController):
    """Constant coefficient: ``update`` leaves ``value`` unchanged."""

    kind = "fixed"

    def update(self, current_kl: float | Tensor, n_steps: int) -> None:
        return None


@KL_CONTROLLERS.register("adaptive")
class AdaptiveKLController(_KLController):
    """Adaptive coefficient of Ziegler et al. 2019 (https://arxiv.org/abs/1909.08593).

    ``e = clip(current_kl / target_kl - 1, -0.2, 0.2)``,
    ``value <- value * (1 + e * min(n_steps / horizon, 1))``.
    The ``min(., 1)`` keeps one update within +-20 % (uncapped, ``n_steps > 5 * horizon``
    would make the coefficient negative).
    """

    kind = "adaptive"

    def __init__(self, kl_coef: float, target_kl: float, horizon: int) -> None:
        super().__init__(kl_coef)
        if not (math.isfinite(target_kl) and target_kl > 0.0):
            raise ValueError(f"target_kl must be finite and > 0, got {target_kl!r}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon!r}")
        self.target_kl = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float | Tensor, n_steps: int) -> None:
        kl = float(current_kl)
        if not math.isfinite(kl):
            raise ValueError(f"current_kl must be finite, got {kl!r}")
        if n_steps < 0:
            raise ValueError(f"n_steps must be >= 0, got {n_steps!r}")
        error = min(max(kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * min(n_steps / self.horizon, 1.0)


# --------------------------------------------------------------------------- entropy


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy ``H = -sum_v p_v log p_v`` of ``softmax(logits)`` over the last dim.

    Computed as ``H = lse(z) - sum_v softmax(z)_v z_v`` with ``z = logits - max``
    (shift invariant, so no cancellation for huge logits). ``-inf`` logits (banned
    tokens) contribute 0 with 0 gradient; a row of only ``-inf`` has entropy 0.
    """
    shift = logits.detach().amax(dim=-1, keepdim=True)
    row_ok = torch.isfinite(shift)
    z = torch.where(row_ok, logits - torch.where(row_ok, shift, 0.0), 0.0)
    z_safe = torch.where(z == -math.inf, 0.0, z)
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    probs = torch.exp(z - lse)
    entropy = (lse - (probs * z_safe).sum(dim=-1, keepdim=True)).squeeze(-1)
    return torch.where(row_ok.squeeze(-1), entropy, 0.0)
