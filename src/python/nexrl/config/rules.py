"""Cross-field rules: problems no single field shows.

Each rule takes the typed config (a structured ``DictConfig``) and the recipe
roots and returns a list of problems; ``RULES`` runs them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nexrl.config.errors import RecipeError
from nexrl.config.modules import load_object, split_spec
from nexrl.config.sections.trainer import TRAINER_BACKENDS

Rule = Callable[[DictConfig, list[Path]], list[str]]


def pool_grouping(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.config.sections.pool import validate_pool_config

    pool = cfg.trajectory_pool
    out = validate_pool_config(pool)  # a typed DictConfig has the same fields
    if pool.key_list == ["group_id"] and cfg.data.rollout_repeat_n != pool.group_size:
        out.append(
            f"data.rollout_repeat_n ({cfg.data.rollout_repeat_n}) must equal "
            f"trajectory_pool.group_size ({pool.group_size}) when grouping by group_id, "
            "or groups never fill"
        )
    return out


def sync_mode_settings(cfg: DictConfig, roots: list[Path]) -> list[str]:
    w = cfg.weight
    if w.sync_mode == "batch-async" and w.staleness_threshold is None:
        return [
            "weight.staleness_threshold: required when weight.sync_mode is 'batch-async' "
            "(how many policy versions rollouts may lag, e.g. 1)"
        ]
    return []


def trainer_fits_backend(cfg: DictConfig, roots: list[Path]) -> list[str]:
    t = cfg.trainer
    out = []
    allowed = TRAINER_BACKENDS.get(t.type, ())
    if t.backend not in allowed:
        out.append(
            f"trainer.type '{t.type}' runs on backend(s) {', '.join(allowed)}, "
            f"not trainer.backend '{t.backend}'"
        )
    if t.zero_stage > 3:
        out.append(f"trainer.zero_stage: DeepSpeed ZeRO stages are 0-3, got {t.zero_stage}")
    if t.offload_param and t.zero_stage != 3:
        out.append("trainer.offload_param needs trainer.zero_stage: 3")
    if t.offload_optimizer and t.zero_stage == 0:
        out.append("trainer.offload_optimizer needs trainer.zero_stage >= 1")
    return out


def paired_fields(cfg: DictConfig, roots: list[Path]) -> list[str]:
    out = []
    for section, a, b in (
        ("rollout_worker", "custom_rollout_worker_module_path", "custom_rollout_worker_class_name"),
        ("trainer", "custom_trainer_module_path", "custom_trainer_class_name"),
    ):
        if (cfg[section][a] is None) != (cfg[section][b] is None):
            out.append(f"{section}.{a} and {section}.{b} go together: set both or neither")
    if cfg.rollout_worker.type == "agent" and not cfg.rollout_worker.agent_config_path:
        out.append("rollout_worker.agent_config_path: required for rollout_worker.type 'agent'")
    if cfg.resume.mode == "from_path" and not cfg.resume.path:
        out.append("resume.path: required when resume.mode is 'from_path'")
    if cfg.cluster.type == "address" and not cfg.cluster.address:
        out.append("cluster.address: required when cluster.type is 'address' (tcp://host:8786)")
    v = cfg.validate
    if (v.freq or v.validate_before_train) and not v.data_files:
        out.append(
            "validate.data_files: required when validate.freq > 0 or validate.validate_before_train"
        )
    if cfg.model.path is None and not cfg.model.tiny.vocab:
        out.append("model.path: set a model directory, or model.tiny.vocab to build a tiny model")
    if not 0 < cfg.rollout_worker.top_p <= 1:
        out.append(f"rollout_worker.top_p must be in (0, 1], got {cfg.rollout_worker.top_p}")
    return out


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


def loadable_classes(cfg: DictConfig, roots: list[Path]) -> list[str]:
    out: list[str] = []

    def check(field: str, file: str, name: str, method: str) -> None:
        try:
            obj: Any = load_object(file, name, roots, field)
        except RecipeError as exc:
            out.extend(exc.problems)
            return
        if not callable(getattr(obj, method, None)):
            out.append(f"{field}: {name} has no '{method}' method")

    rw = cfg.rollout_worker
    try:
        file, name = split_spec(rw.evaluator_module_path, "rollout_worker.evaluator_module_path")
        check("rollout_worker.evaluator_module_path", file, name, "evaluate")
    except RecipeError as exc:
        out.extend(exc.problems)
    if rw.custom_rollout_worker_module_path and rw.custom_rollout_worker_class_name:
        field = "rollout_worker.custom_rollout_worker_class_name"
        try:
            cls = load_object(
                rw.custom_rollout_worker_module_path,
                rw.custom_rollout_worker_class_name,
                roots,
                field,
            )
        except RecipeError as exc:
            out.extend(exc.problems)
        else:
            from nexrl.rollout_worker.base import BaseRolloutWorker, missing_episode_method

            if not (isinstance(cls, type) and issubclass(cls, BaseRolloutWorker)):
                out.append(f"{field}: {cls!r} is not a subclass of BaseRolloutWorker")
            elif problem := missing_episode_method(cls):
                out.append(f"{field}: {problem}")
    t = cfg.trainer
    if t.custom_trainer_module_path and t.custom_trainer_class_name:
        check(
            "trainer.custom_trainer_class_name",
            t.custom_trainer_module_path,
            t.custom_trainer_class_name,
            "_prepare_batch",
        )
    return out


def logger_backends(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.metrics.sinks import METRIC_SINKS, missing_packages

    out = []
    valid = ", ".join(METRIC_SINKS)
    for name in cfg.logger.backends:
        if name not in METRIC_SINKS:
            close = difflib.get_close_matches(str(name), list(METRIC_SINKS), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            out.append(f"logger.backends: unknown metric sink '{name}'; {hint}valid: {valid}")
        elif missing := missing_packages(name):
            need = " ".join(missing)
            out.append(
                f"logger.backends: '{name}' needs {need}, which is not installed: "
                f"pip install {need}, or remove '{name}' from logger.backends"
            )
    return out


def agent_config(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Type 'agent' needs an agent config that loads (its problems are listed)."""
    rw = cfg.rollout_worker
    if rw.type != "agent":
        return []
    if not rw.agent_config_path:
        return ["rollout_worker.agent_config_path: required with rollout_worker.type: agent"]
    from nexrl.config.modules import resolve_path
    from nexrl.rollout_worker.agent.config import AgentConfigError, load_agent_config

    path = resolve_path(str(rw.agent_config_path), roots)
    if path is None:
        return [f"rollout_worker.agent_config_path: '{rw.agent_config_path}' not found"]
    try:
        load_agent_config(path)
    except AgentConfigError as exc:
        return [f"rollout_worker.agent_config_path: {p} ({path})" for p in exc.problems]
    return []


def warm_start_demos(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Warm-start demonstrations are for the tiny model and must be well formed."""
    files = list(cfg.model.tiny.warm_start.data_files)
    if not files:
        return []
    field = "model.tiny.warm_start.data_files"
    if cfg.model.path:
        return []  # the tiny model is not built: nothing to warm-start (prepare_model says so)
    from nexrl.config.modules import resolve_path
    from nexrl.modeling.warm_start import WarmStartError, load_demos

    paths = [resolve_path(str(f), roots) for f in files]
    if any(p is None for p in paths):
        return []  # the path check of the field already reports it
    try:
        load_demos([p for p in paths if p is not None], field)
    except WarmStartError as exc:
        return [str(exc)]
    return []


def openai_agent_entrypoint(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Type 'openai_agent' needs an agent function that loads and has the right signature."""
    from nexrl.rollout_worker.openai_agent.entrypoint import ENTRYPOINT_FIELD, load_entrypoint

    rw = cfg.rollout_worker
    if rw.type != "openai_agent":
        if rw.agent_entrypoint and not rw.custom_rollout_worker_module_path:
            return [
                f"{ENTRYPOINT_FIELD}: set, but rollout_worker.type is '{rw.type}'; use "
                "rollout_worker.type: openai_agent to run the agent function"
            ]
        return []
    if not rw.agent_entrypoint:
        return [
            f"{ENTRYPOINT_FIELD}: required with rollout_worker.type: openai_agent "
            "('path/to/agent.py:function')"
        ]
    out = []
    if rw.agent_timeout_s >= cfg.runtime_monitor.task_timeout_s:
        out.append(
            f"rollout_worker.agent_timeout_s ({rw.agent_timeout_s:g}) must be below "
            f"runtime_monitor.task_timeout_s ({cfg.runtime_monitor.task_timeout_s:g}), or "
            "the rollout future is cancelled before the agent's own timeout can name it"
        )
    try:
        load_entrypoint(str(rw.agent_entrypoint), roots)
    except RecipeError as exc:
        out.extend(exc.problems)
    return out


RULES: tuple[Rule, ...] = (
    pool_grouping,
    sync_mode_settings,
    trainer_fits_backend,
    paired_fields,
    registered_algorithms,
    loadable_classes,
    logger_backends,
    agent_config,
    warm_start_demos,
    openai_agent_entrypoint,
)
