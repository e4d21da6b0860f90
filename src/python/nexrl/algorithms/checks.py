"""The algorithms' checks: every ``algorithm`` name is registered (built in or by a plugin)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from nexrl.config.checks import register_check

__all__ = ["registered_algorithms"]


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
    ):
        try:
            registry.get(a[field])
        except KeyError as exc:
            out.append(f"algorithm.{field}: {exc.args[0] if exc.args else exc}")
    return out
