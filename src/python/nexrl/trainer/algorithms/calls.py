"""The chosen advantage estimator and policy loss, called as the trainer calls them:
the recipe's ``algorithm`` fields they take, passed by name. The trainer
(``nexrl.trainer.grpo``, ``nexrl.trainer.loss``) and the recipe check that tries a
plugin's pieces on a small batch (``nexrl.trainer.algorithms.checks``) both go through here,
so the check calls exactly what a step will."""

from __future__ import annotations

from typing import Any

from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from nexrl.trainer.algorithms.defaults import LOSS_FIELDS
from nexrl.trainer.algorithms.registry import call_with_options

__all__ = ["ESTIMATOR_FIELDS", "call_advantage_estimator", "call_policy_loss"]

ESTIMATOR_FIELDS = ("norm_adv_by_std", "std_ddof", "gamma", "lam", "n_step")  # passed when set


def call_advantage_estimator(
    algo: Any, rewards: Any, mask: Any, group_ids: Any, run_ids: Any, values: Any = None
) -> Any:
    """``(advantages [B, T], returns [B, T])`` of ``algo.advantage_estimator``; ``values``
    (the critic's, ``[B, T]``) go to an estimator that takes them (``gae``, ``nstep``)."""
    extra = {} if values is None else {"values": values}
    return call_with_options(
        ADVANTAGE_ESTIMATORS.get(algo.advantage_estimator),
        rewards,
        mask,
        group_ids,
        run_ids,
        **_set_fields(algo, ESTIMATOR_FIELDS),
        **extra,
    )


def call_policy_loss(
    algo: Any, log_probs: Any, old_log_probs: Any, advantages: Any, mask: Any
) -> Any:
    """``(loss [], metrics)`` of ``algo.policy_loss`` with its aggregation mode."""
    return call_with_options(
        POLICY_LOSSES.get(algo.policy_loss),
        log_probs,
        old_log_probs,
        advantages,
        mask,
        algo.loss_agg_mode or "token-mean",
        loss_norm_length=algo.loss_norm_length,
        **_set_fields(algo, LOSS_FIELDS),
    )


def _set_fields(algo: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """The ``algorithm`` fields among ``fields`` that the recipe sets (not None)."""
    return {k: getattr(algo, k) for k in fields if getattr(algo, k) is not None}
