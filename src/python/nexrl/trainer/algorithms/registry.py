"""Name -> implementation registries for the RL algorithms.

A recipe names its algorithm pieces by string (``advantage_estimator: grpo``);
the trainer resolves them here. Four module-level registries exist, filled by
the submodules when :mod:`nexrl.trainer.algorithms` is imported:

``ADVANTAGE_ESTIMATORS`` (:mod:`.advantages`)
    ``fn(token_level_rewards [B, T], response_mask [B, T], group_ids [B],
    run_ids [B] | None = None, **options) -> (advantages [B, T], returns [B, T])``

``POLICY_LOSSES`` (:mod:`.policy_loss`)
    ``fn(log_prob [B, T], old_log_prob [B, T], advantages [B, T],
    response_mask [B, T], loss_agg_mode: str = "token-mean", **options)
    -> (loss [], metrics: dict[str, Tensor])``

``KL_PENALTIES`` (:mod:`.kl`)
    ``fn(log_prob [B, T], ref_log_prob [B, T], response_mask [B, T] | None = None)
    -> per-token penalty [B, T]``

``KL_CONTROLLERS`` (:mod:`.kl`)
    classes with ``value``, ``update(current_kl, n_steps)``, ``state_dict()``,
    ``load_state_dict(state)``.

``LOSS_AGGREGATIONS`` (:mod:`.aggregation`)
    :class:`~nexrl.trainer.algorithms.aggregation.LossAggregation` entries:
    ``reduce(masked_loss [B, T], valid [B, T], norm_length)`` and their units.

An implementation's own defaults are its keyword defaults; an advantage
estimator can also ask the other pieces for defaults with :func:`presets`
(``dr_grpo`` asks for the constant-normaliser aggregation).
:func:`nexrl.trainer.algorithms.defaults.resolve_algorithm` applies both.

Looking up an unknown name raises :class:`UnknownNameError`, which says which
registry was asked, suggests the closest valid name and lists all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from nexrl.core.plugins.registry import Registry, UnknownNameError

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_CONTROLLERS",
    "KL_PENALTIES",
    "POLICY_LOSSES",
    "PRESETS_ATTR",
    "Registry",
    "UnknownNameError",
    "call_with_options",
    "presets",
    "presets_of",
]

_F = TypeVar("_F", bound=Callable[..., Any])
PRESETS_ATTR = "__nexrl_presets__"


# The value types are kept loose (``Callable[..., Any]`` / ``type``): each
# implementation has its own keyword options (see the signatures above).
ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry("advantage estimator")
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss")
KL_PENALTIES: Registry[Callable[..., Any]] = Registry("KL penalty")
KL_CONTROLLERS: Registry[type[Any]] = Registry("KL controller")


def presets(**defaults: Any) -> Callable[[_F], _F]:
    """Decorator: the ``algorithm`` fields this implementation sets when the recipe
    leaves them null (e.g. ``@presets(loss_agg_mode="seq-mean-token-sum-norm")``)."""

    def decorator(fn: _F) -> _F:
        setattr(fn, PRESETS_ATTR, dict(defaults))
        return fn

    return decorator


def presets_of(fn: Any) -> dict[str, Any]:
    """The presets :func:`presets` attached to ``fn`` ({} if none)."""
    return dict(getattr(fn, PRESETS_ATTR, {}))


def call_with_options(fn: Any, *args: Any, **options: Any) -> Any:
    """Call ``fn(*args, **options)`` passing only the options ``fn`` accepts (each
    registered function takes its own subset of the ``algorithm`` fields)."""
    import inspect

    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **options)
    return fn(*args, **{k: v for k, v in options.items() if k in params})
