"""The check registry: each component registers the cross-field checks of its sections.

A check takes the typed recipe (a structured ``DictConfig``) and the recipe roots
(where relative paths resolve) and returns its problems, one line each, naming
the field and the fix. A component writes its checks next to its code::

    # nexrl/core/pool/checks.py
    from nexrl.core.config.checks import register_check

    @register_check
    def pool_grouping(cfg, roots):
        ...

``nexrl.driver.recipe`` imports every component's check module, so all are
registered before a recipe is checked, and runs them with ``run_checks``.
This module imports nothing from nexrl: config stays at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

__all__ = ["CHECKS", "Check", "register_check", "run_checks"]

Check = Callable[[DictConfig, list[Path]], list[str]]

# "component.check_name" -> check; the component is the package that registered it.
CHECKS: dict[str, Check] = {}


def _component(fn: Check) -> str:
    parts = fn.__module__.split(".")
    # nexrl.core.pool.checks -> core.pool; a plugin file's module keeps its own name
    if parts[0] == "nexrl" and len(parts) > 1:
        return ".".join(parts[1:-1] if parts[-1] == "checks" and len(parts) > 2 else parts[1:])
    return fn.__module__


def register_check(fn: Check) -> Check:
    """Register ``fn`` (a decorator); registering the same function again replaces it."""
    CHECKS[f"{_component(fn)}.{fn.__name__}"] = fn
    return fn


def run_checks(cfg: DictConfig, roots: list[Path], *, skip_failing: bool = False) -> list[str]:
    """Every registered check's problems, in registration order.

    With ``skip_failing`` a check that raises is skipped: the recipe already has
    structure problems (a missing required value, a wrong type) that the check
    tripped over, and they are reported instead.
    """
    problems: list[str] = []
    for check in list(CHECKS.values()):
        try:
            problems.extend(check(cfg, roots))
        except Exception:
            if not skip_failing:
                raise
    return problems
