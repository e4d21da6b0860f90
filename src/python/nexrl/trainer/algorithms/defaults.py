"""Each algorithm's own defaults: the ``algorithm`` fields a recipe leaves null.

A null field takes, in this order:

1. the advantage estimator's presets (``@presets``: ``dr_grpo`` presets
   ``loss_agg_mode: seq-mean-token-sum-norm``),
2. the keyword default of the registered function that uses the field: the
   policy loss for ``loss_agg_mode``, ``clip_ratio_low`` / ``clip_ratio_high`` /
   ``clip_ratio_c``, ``max_ratio`` (``gspo``: 3e-4 / 4e-4 and
   ``seq-mean-token-mean``; ``ppo_clip``: 0.2 / 0.2 and ``token-mean``); the
   advantage estimator for ``norm_adv_by_std`` (``grpo``: true, ``dr_grpo``: false),
3. ``loss_norm_length``: the max response length, when the aggregation mode
   uses it (``seq-mean-token-sum-norm``),
4. else ``token-mean`` for ``loss_agg_mode``; a field no chosen function takes
   stays null (it does not apply).

A value the recipe sets always wins. ``resolve_algorithm`` is applied by the
recipe loader (so ``--print-config`` and the run's ``config.yaml`` show the
values in effect) and again by the trainer (for a ``TrainerSpec`` built in Python).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.trainer.algorithms.aggregation import LOSS_AGGREGATIONS
from nexrl.trainer.algorithms.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, presets_of

__all__ = ["LOSS_FIELDS", "keyword_defaults", "resolve_algorithm"]

# The algorithm fields passed to the policy loss by name (when it takes them).
LOSS_FIELDS = ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "max_ratio")
_ESTIMATOR_FIELDS = ("norm_adv_by_std",)


def keyword_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{parameter: default}`` of ``fn``'s parameters that have a default."""
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def resolve_algorithm(
    algo: AlgorithmConfig, *, max_response_length: int | None = None
) -> AlgorithmConfig:
    """A copy of ``algo`` with its null fields filled as the module doc says."""
    estimator = ADVANTAGE_ESTIMATORS.get(algo.advantage_estimator)
    loss = POLICY_LOSSES.get(algo.policy_loss)
    preset = presets_of(estimator)
    loss_defaults = keyword_defaults(loss)
    estimator_defaults = keyword_defaults(estimator)
    out: dict[str, Any] = {}
    for name in (*LOSS_FIELDS, *_ESTIMATOR_FIELDS, "loss_agg_mode", "loss_norm_length"):
        if getattr(algo, name) is not None:
            continue
        if name in preset:
            out[name] = preset[name]
        elif name in _ESTIMATOR_FIELDS and name in estimator_defaults:
            out[name] = estimator_defaults[name]
        elif name != "loss_norm_length" and name in loss_defaults:
            out[name] = loss_defaults[name]
    mode = out.get("loss_agg_mode", algo.loss_agg_mode) or "token-mean"
    out["loss_agg_mode"] = mode
    if (
        algo.loss_norm_length is None
        and "loss_norm_length" not in out
        and max_response_length is not None
        and LOSS_AGGREGATIONS.get(mode).uses_norm_length
    ):
        out["loss_norm_length"] = float(max_response_length)
    return dataclasses.replace(algo, **out)
