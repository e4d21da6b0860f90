"""The algorithms' checks: every ``algorithm`` name is registered (built in or by a
plugin), every field set is one the chosen functions take, and the chosen advantage
estimator and policy loss run on a small batch as the trainer calls them."""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check
from nexrl.trainer.algorithms.value import estimator_takes_values

__all__ = ["chosen_pieces_run", "groups_of_one_learn", "registered_algorithms", "settings_apply"]


@register_check
def registered_algorithms(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.trainer import algorithms

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
    from nexrl.trainer.algorithms import POLICY_LOSSES
    from nexrl.trainer.algorithms.defaults import LOSS_FIELDS

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

    from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS
    from nexrl.trainer.algorithms.registry import call_with_options

    a = cfg.algorithm
    if str(cfg.mode) != "rl" or int(cfg.rollout_worker.group_size) != 1:
        return []
    if a.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        return []  # registered_algorithms says so
    options = {k: a[k] for k in ("norm_adv_by_std", "std_ddof", "gamma") if a[k] is not None}
    rewards = torch.tensor([[1.0], [0.0], [0.5]])
    if estimator_takes_values(ADVANTAGE_ESTIMATORS.get(a.advantage_estimator)):
        return []  # a critic's baseline: groups of one learn
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


_ESTIMATOR_CALL = (
    "it is called as fn(token_level_rewards [B, T], response_mask [B, T], group_ids [B], "
    "run_ids [B] | None, **options) and returns (advantages [B, T], returns [B, T])"
)
_LOSS_CALL = (
    "it is called as fn(log_prob [B, T], old_log_prob [B, T], advantages [B, T], "
    "response_mask [B, T], loss_agg_mode, **options) and returns (loss [], metrics dict)"
)


def _where(fn: object) -> str:
    """``file:line`` of a registered function (a plugin's or nexrl's own)."""
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"  # type: ignore[arg-type]
    except (OSError, TypeError):
        return getattr(fn, "__module__", "?")


@register_check
def chosen_pieces_run(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """The advantage estimator and policy loss the recipe chooses (a plugin's above all),
    called as the trainer calls them on 2 prompts x 2 samples of 3 response tokens (one
    padded): one that raises (a wrong signature), returns the wrong shapes or NaN/inf is
    one line naming the field, the function's file and the calling convention, before
    any cluster starts, instead of a trainer failure at step 1."""
    import torch

    from nexrl.core.config.schema import typed
    from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, resolve_algorithm
    from nexrl.trainer.algorithms.calls import call_advantage_estimator, call_policy_loss

    if str(cfg.mode) != "rl":
        return []
    if cfg.algorithm.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        return []  # registered_algorithms says so
    if cfg.algorithm.policy_loss not in POLICY_LOSSES:
        return []
    # the values in effect in the trainer (null fields filled from the chosen pieces)
    try:
        a = resolve_algorithm(
            typed(cfg.algorithm), max_response_length=int(cfg.rollout_worker.max_response_length)
        )
    except Exception:  # an unknown mode or a field a piece does not take: named elsewhere
        return []
    out: list[str] = []
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    rewards = torch.zeros(4, 3)
    rewards[torch.arange(4), mask.sum(-1) - 1] = torch.tensor([1.0, 0.0, 0.5, 1.0])
    advantages = torch.tensor([[0.5] * 3, [-0.5] * 3, [-0.5] * 3, [0.5] * 3]) * mask
    name = a.advantage_estimator
    fn = ADVANTAGE_ESTIMATORS.get(name)
    problem = None
    try:
        values = torch.full((4, 3), 0.25) if estimator_takes_values(fn) else None
        got = call_advantage_estimator(
            a, rewards, mask, torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1]), values
        )
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            problem = f"returned {type(got).__name__}, not a pair (advantages, returns)"
        elif not all(isinstance(t, torch.Tensor) and t.shape == mask.shape for t in got):
            shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t) for t in got]
            problem = f"returned shapes {shapes} for a [4, 3] batch"
        elif not all(bool(torch.isfinite(t[mask]).all()) for t in got):
            problem = "returned NaN/inf on finite rewards"
        else:
            advantages = got[0].detach().float()
    except Exception as exc:
        problem = f"raised {type(exc).__name__}: {exc}"
    if problem:
        out.append(
            f"algorithm.advantage_estimator: {name!r} ({_where(fn)}) {problem} on a test "
            f"batch of 2 prompts x 2 samples; {_ESTIMATOR_CALL}"
        )
    name = a.policy_loss
    fn = POLICY_LOSSES.get(name)
    old = torch.log(torch.full((4, 3), 0.5))
    log_prob = (old + torch.tensor([0.1, -0.1, 0.05])).requires_grad_(True)
    problem = None
    try:
        got = call_policy_loss(a, log_prob, old, advantages, mask)
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], dict)):
            problem = f"returned {type(got).__name__}, not a pair (loss, metrics dict)"
        elif not (isinstance(got[0], torch.Tensor) and got[0].numel() == 1):
            shape = tuple(got[0].shape) if isinstance(got[0], torch.Tensor) else type(got[0])
            problem = f"returned a loss of shape {shape}, not one number"
        elif not bool(torch.isfinite(got[0]).all()):
            problem = "returned a NaN/inf loss on finite log-probs and advantages"
    except Exception as exc:
        problem = f"raised {type(exc).__name__}: {exc}"
    if problem:
        out.append(
            f"algorithm.policy_loss: {name!r} ({_where(fn)}) {problem} on a test batch "
            f"of 4 samples; {_LOSS_CALL}"
        )
    return out
