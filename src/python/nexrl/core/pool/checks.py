"""The pool's checks: ``trajectory_pool`` settings that only make sense together
(and with dynamic sampling, which the pool does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check
from nexrl.core.config.sections.pool import META_KEY_PREFIXES, SCALAR_KEYS
from nexrl.core.pool.layout import Chunking

__all__ = ["pool_grouping", "validate_pool_config"]


def validate_pool_config(cfg: Any) -> list[str]:
    """Cross-field problems of a pool config (a ``PoolConfig``, or anything with its
    fields); empty when fine."""
    problems: list[str] = []
    for key in cfg.key_list:
        if key not in SCALAR_KEYS and not (
            key.startswith(META_KEY_PREFIXES) and len(key.split(".", 1)[1]) > 0
        ):
            problems.append(
                f"trajectory_pool.key_list: unknown key {key!r}; use one of "
                f"{', '.join(SCALAR_KEYS)} or extra_info.<name> / data_item.<name> / "
                "metrics.<name>"
            )
    if len(set(cfg.key_list)) != len(cfg.key_list):
        problems.append("trajectory_pool.key_list: a key is listed twice")
    grouped_batches = cfg.key_list and cfg.batch_readiness != "loaded_batch_finished"
    if grouped_batches and cfg.batch_size % cfg.group_size:
        problems.append(
            f"trajectory_pool.batch_size ({cfg.batch_size}) must be a multiple of "
            f"group_size ({cfg.group_size}): batches are made of whole groups of "
            "rollout_worker.group_size"
        )
    if getattr(cfg, "filter_zero_variance", False) and (not cfg.key_list or cfg.group_size < 2):
        problems.append(
            "algorithm.filter_zero_variance_groups needs groups of >= 2 samples "
            "(trajectory_pool.key_list, e.g. [group_id], and rollout_worker.group_size >= 2): "
            "a group of one has no reward variance and every trajectory would be dropped"
        )
    if not cfg.consumer or "/" in cfg.consumer or cfg.consumer.startswith("."):
        problems.append(f"trajectory_pool.consumer: {cfg.consumer!r} is not a plain name")
    unknown = set(cfg.chunking) - set(Chunking.__dataclass_fields__)
    if unknown:
        problems.append(f"trajectory_pool.chunking: unknown option(s) {sorted(unknown)}")
    return problems


@register_check
def pool_grouping(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.core.pool.config import PoolConfig

    pool = PoolConfig.from_section(
        cfg.trajectory_pool,
        cfg.rollout_worker.group_size,
        filter_zero_variance=bool(cfg.algorithm.filter_zero_variance_groups),
    )
    return validate_pool_config(pool)
