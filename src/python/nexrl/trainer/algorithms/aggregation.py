"""Loss aggregation modes (registered in ``LOSS_AGGREGATIONS``): per-token loss -> one number.

A mode reduces a per-token loss ``L [B, T]`` over the valid tokens ``m`` and
averages over its *units*: valid tokens (``token-mean``) or sequences with at
least one valid token, ``S`` (every ``seq-mean-*`` mode). The trainer weights
each micro-batch by its share of the units, so the gradient is that of the
mode applied to the whole global batch.

- ``token-mean``:              ``sum_{i,t} m L / sum_{i,t} m``
- ``seq-mean-token-sum``:      ``1/|S| sum_{i in S} sum_t m L``
- ``seq-mean-token-mean``:     ``1/|S| sum_{i in S} (sum_t m L / sum_t m)``
- ``seq-mean-token-sum-norm``: ``1/|S| sum_{i in S} sum_t m L / C`` with a constant
  ``C`` (``algorithm.loss_norm_length``, default the max response length): the
  constant normaliser of Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like
  Training", https://arxiv.org/abs/2503.20783), which removes the
  per-sequence length bias of ``seq-mean-token-mean``; verl calls it by this name.

Fully masked rows (padding rows of a micro-batch) are not units. The loss is 0
when nothing is valid. Values at masked positions are ignored, even NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from nexrl.core.plugins.registry import Registry

__all__ = [
    "LOSS_AGGREGATIONS",
    "LOSS_AGG_MODES",
    "LossAggregation",
    "agg_loss",
    "agg_units",
    "register_aggregation",
]

# reduce(masked loss [B, T] (0 on invalid tokens), valid [B, T] bool, norm_length) -> sum
ReduceFn = Callable[[Tensor, Tensor, "float | None"], Tensor]


@dataclass(frozen=True)
class LossAggregation:
    """A registered mode: ``reduce`` and what its mean is over.

    ``reduce(masked_loss, valid, norm_length)`` returns the sum over the units of
    the batch (a scalar); ``agg_loss`` divides it by the number of units.
    ``per_sequence``: the units are non-empty sequences (else valid tokens).
    ``uses_norm_length``: the mode needs ``loss_norm_length`` (a constant).
    """

    name: str
    reduce: ReduceFn
    per_sequence: bool
    uses_norm_length: bool = False


LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry("loss aggregation mode")


def register_aggregation(
    name: str, *, per_sequence: bool, uses_norm_length: bool = False
) -> Callable[[ReduceFn], ReduceFn]:
    """Decorator: register ``fn(masked_loss, valid, norm_length) -> sum over units``."""

    def decorator(fn: ReduceFn) -> ReduceFn:
        LOSS_AGGREGATIONS.register(name)(LossAggregation(name, fn, per_sequence, uses_norm_length))
        return fn

    return decorator


@register_aggregation("token-mean", per_sequence=False)
def token_mean(masked: Tensor, valid: Tensor, norm_length: float | None) -> Tensor:
    """Sum of the valid tokens' losses (divided by the number of valid tokens)."""
    return masked.sum()


@register_aggregation("seq-mean-token-sum", per_sequence=True)
def seq_mean_token_sum(masked: Tensor, valid: Tensor, norm_length: float | None) -> Tensor:
    """Sum over sequences of each sequence's token sum (divided by the sequences)."""
    return masked.sum()


@register_aggregation("seq-mean-token-mean", per_sequence=True)
def seq_mean_token_mean(masked: Tensor, valid: Tensor, norm_length: float | None) -> Tensor:
    """Sum over sequences of each sequence's token mean (divided by the sequences)."""
    return (masked.sum(-1) / valid.sum(-1).clamp_min(1)).sum()


@register_aggregation("seq-mean-token-sum-norm", per_sequence=True, uses_norm_length=True)
def seq_mean_token_sum_norm(masked: Tensor, valid: Tensor, norm_length: float | None) -> Tensor:
    """Sum over sequences of each sequence's token sum / C (divided by the sequences)."""
    if norm_length is None or not norm_length > 0:
        raise ValueError(
            "loss aggregation 'seq-mean-token-sum-norm' needs loss_norm_length > 0 "
            f"(algorithm.loss_norm_length), got {norm_length!r}"
        )
    return masked.sum() / norm_length


# The built-in modes (plugins may register more).
LOSS_AGG_MODES: tuple[str, ...] = tuple(LOSS_AGGREGATIONS.names())


def agg_units(mask: Tensor, mode: str) -> Tensor:
    """Number of units of ``mode`` in ``mask`` (a 0-d integer tensor)."""
    valid = mask.bool()
    if LOSS_AGGREGATIONS.get(mode).per_sequence:
        return valid.any(-1).sum()
    return valid.sum()


def agg_loss(
    loss_mat: Tensor, mask: Tensor, mode: str = "token-mean", *, norm_length: float | None = None
) -> Tensor:
    """Reduce ``loss_mat [B, T]`` to a scalar with the registered ``mode`` (module doc)."""
    agg = LOSS_AGGREGATIONS.get(mode)
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat shape {tuple(loss_mat.shape)} != mask {tuple(mask.shape)}")
    valid = mask.bool()
    masked = torch.where(valid, loss_mat, 0.0)
    return agg.reduce(masked, valid, norm_length) / agg_units(valid, mode).clamp_min(1)
