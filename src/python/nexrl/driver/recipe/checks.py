"""Run-wide checks that belong to no one component: sync mode, resume, cluster, validation.

Each component registers its own checks next to its code (``nexrl/<component>/checks.py``);
``nexrl.driver.recipe.load`` imports them all.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check

__all__ = [
    "cluster_tls",
    "cluster_type",
    "resume_keeps_the_model",
    "run_settings",
    "sync_mode_settings",
]


@register_check
def sync_mode_settings(cfg: DictConfig, roots: list[Path]) -> list[str]:
    w = cfg.weight
    if w.sync_mode == "batch-async" and w.staleness_threshold is None:
        return [
            "weight.staleness_threshold: required when weight.sync_mode is 'batch-async' "
            "(how many policy versions rollouts may lag, e.g. 1)"
        ]
    return []


@register_check
def run_settings(cfg: DictConfig, roots: list[Path]) -> list[str]:
    out = []
    if cfg.resume.mode == "from_path" and not cfg.resume.path:
        out.append("resume.path: required when resume.mode is 'from_path'")
    if cfg.cluster.type == "address" and not cfg.cluster.address:
        out.append("cluster.address: required when cluster.type is 'address' (tcp://host:8786)")
    v = cfg.validate
    if (v.every or v.validate_before_train) and not v.data_files:
        out.append(
            "validate.data_files: required when validate.every > 0 or validate.validate_before_train"
        )
    return out


@register_check
def cluster_tls(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``cluster.tls``: the three files (readable, a PEM pair) or temporary, for a
    cluster type that is wired, checked before any cluster starts."""
    from nexrl.driver.cluster.tls import recipe_problems

    return recipe_problems(cfg.cluster, roots)


@register_check
def cluster_type(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``cluster.type``: a registered cluster type or a 'path/to/file.py:start' function."""
    from nexrl.driver.cluster.cluster import CLUSTER_TYPES

    return CLUSTER_TYPES.problems(cfg.cluster.type, roots)


@register_check
def resume_keeps_the_model(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``resume.mode: auto`` on a run folder whose checkpoint is of another model (its
    ``config.yaml`` records other ``model.*`` / ``trainer.lora.*`` settings): the resume
    would load the old weights and keep training them while the recipe says otherwise."""
    if str(cfg.resume.mode) != "auto":
        return []
    from nexrl.core.config.record import another_run, model_changes, recorded_yaml
    from nexrl.core.weights.checkpoint import CheckpointManager

    out = Path(str(cfg.output_dir)).expanduser().resolve()
    recorded = out / "config.yaml"
    if not recorded.is_file() or CheckpointManager(out / "checkpoints").latest() is None:
        return []
    changes = model_changes(recorded.read_text(), recorded_yaml(cfg))
    if not changes:
        return []
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
    return [
        f"resume.mode: auto would continue {out}, a run of another model ({shown}), and "
        f"keep training its checkpoint; start a new run with {another_run(cfg)}, or set "
        "those back to resume it"
    ]
