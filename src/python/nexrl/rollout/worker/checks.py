"""The rollout worker's checks: the evaluator and a custom worker class (instantiated,
with the first data rows and a dry run: ``dry_run``), the agent config of type
'agent', the agent function of type 'openai_agent', sampling."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nexrl.core.config.checks import register_check
from nexrl.core.config.errors import RecipeError
from nexrl.core.config.paths import resolve_path

__all__ = [
    "agent_config",
    "openai_agent_entrypoint",
    "sampling_settings",
    "task_code",
]


@register_check
def task_code(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """The evaluator and a custom worker instantiate, the first data rows hold what they
    read, and the example answer scores (``nexrl.rollout.worker.dry_run``)."""
    from nexrl.rollout.worker import dry_run

    if cfg.get("mode", "rl") == "sft":
        return []  # no rollouts: nothing to score
    if OmegaConf.is_missing(cfg.rollout_worker, "evaluator"):  # e.g. no rollout_worker section
        return [
            "rollout_worker.evaluator: required field is missing (the class that scores "
            "each rollout)"
        ]

    evaluator, out = dry_run.instantiate_evaluator(cfg, roots)
    worker, problems = dry_run.instantiate_worker(cfg, roots, evaluator)
    out += problems
    if out:
        return out
    return dry_run.task_rows(cfg, roots, evaluator, worker)


@register_check
def sampling_settings(cfg: DictConfig, roots: list[Path]) -> list[str]:
    top_p = cfg.rollout_worker.top_p
    if not 0 < top_p <= 1:
        return [f"rollout_worker.top_p must be in (0, 1], got {top_p}"]
    return []


@register_check
def agent_config(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Type 'agent' needs an agent config that loads (its problems are listed)."""
    rw = cfg.rollout_worker
    if rw.type != "agent":
        return []
    if not rw.agent_config_path:
        return ["rollout_worker.agent_config_path: required with rollout_worker.type: agent"]
    from nexrl.rollout.worker.agent.config import AgentConfigError, load_agent_config

    path = resolve_path(str(rw.agent_config_path), roots)
    if path is None:
        return [f"rollout_worker.agent_config_path: '{rw.agent_config_path}' not found"]
    try:
        load_agent_config(path)
    except AgentConfigError as exc:
        return [f"rollout_worker.agent_config_path: {p} ({path})" for p in exc.problems]
    return []


@register_check
def openai_agent_entrypoint(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Type 'openai_agent' needs an agent function that loads and has the right signature."""
    rw = cfg.rollout_worker
    if rw.type != "openai_agent" and not rw.agent_entrypoint:
        return []  # (the agent package imports openai: ~1 s a recipe check need not pay)
    from nexrl.rollout.worker.openai_agent.entrypoint import ENTRYPOINT_FIELD, load_entrypoint

    if rw.type != "openai_agent":
        if rw.agent_entrypoint and not rw.custom_worker:
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
