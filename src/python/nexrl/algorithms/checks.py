"""The algorithms' checks: every ``algorithm`` name is registered (built in or by a
plugin), and every field set is one the chosen functions take."""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig

from nexrl.config.checks import register_check

__all__ = ["groups_of_one_learn", "registered_algorithms", "settings_apply"]


@register_check
def registered_algorithms(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl import algorithms

    a = cfg.algorithm
    out = []
    for field, registry in (
        ("advantage_estimator", algorithms.ADVANTAGE_ESTIMATORS),
        ("policy_loss", algorithms.POLICY_LOSSES),
        ("kl_penalty", algorithms.KL_PENALTIES),
        ("kl_controller", algorithms.KL_CONTROLLERS),
        ("loss_agg_mode", algorithms.LOSS_AGGREGATIONS),
    ):
        if a[field] is None:
            continue
        try:
            registry.get(a[field])
        except KeyError as exc:
            out.append(f"algorithm.{field}: {exc.args[0] if exc.args else exc}")
    mode = a.rollout_correction.mode
    if mode != "none" and mode not in algorithms.ROLLOUT_CORRECTIONS:
        valid = ", ".join(["'none'", *(repr(n) for n in algorithms.ROLLOUT_CORRECTIONS.names())])
        out.append(f"algorithm.rollout_correction.mode: unknown mode {mode!r}; valid: {valid}")
    return out


@register_check
def settings_apply(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """A loss setting the chosen policy loss does not take is a mistake, not a no-op."""
    from nexrl.algorithms import POLICY_LOSSES
    from nexrl.algorithms.defaults import LOSS_FIELDS

    a = cfg.algorithm
    if a.policy_loss not in POLICY_LOSSES:
        return []  # registered_algorithms says so
    loss = POLICY_LOSSES.get(a.policy_loss)
    params = inspect.signature(loss).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [
        f"algorithm.{field}: policy loss {a.policy_loss!r} does not take it; remove it or "
        "choose a loss that does"
        for field in LOSS_FIELDS
        if a[field] is not None and field not in params
    ]


@register_check
def groups_of_one_learn(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``rollout_worker.group_size: 1`` with an estimator that compares the samples of a
    prompt's group (GRPO, RLOO, ...): every advantage is 0 and the run learns nothing.
    Asked of the estimator itself, with the recipe's options: three groups of one with
    different rewards."""
    import torch

    from nexrl.algorithms import ADVANTAGE_ESTIMATORS
    from nexrl.algorithms.registry import call_with_options

    a = cfg.algorithm
    if str(cfg.mode) != "rl" or int(cfg.rollout_worker.group_size) != 1:
        return []
    if a.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        return []  # registered_algorithms says so
    options = {k: a[k] for k in ("norm_adv_by_std", "std_ddof", "gamma") if a[k] is not None}
    rewards = torch.tensor([[1.0], [0.0], [0.5]])
    advantages, _ = call_with_options(
        ADVANTAGE_ESTIMATORS.get(a.advantage_estimator),
        rewards,
        torch.ones_like(rewards),
        torch.arange(3),
        None,
        **options,
    )
    if bool(advantages.abs().max() > 0):
        return []
    return [
        f"rollout_worker.group_size: 1 gives every sample advantage 0 with "
        f"algorithm.advantage_estimator {a.advantage_estimator!r} (it compares the samples "
        "of one prompt), so nothing would be learned; use group_size >= 2 (e.g. 8, with "
        "trajectory_pool.batch_size a multiple of it) or an estimator with a batch "
        "baseline (reinforce_plus_plus)"
    ]
