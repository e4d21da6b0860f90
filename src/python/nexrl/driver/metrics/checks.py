"""The metrics' checks: every ``logger.backends`` entry is a known, installed sink."""

from __future__ import annotations

import difflib
from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check
from nexrl.core.plugins.registry import is_spec

__all__ = ["logger_backends"]


@register_check
def logger_backends(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.driver.metrics.sinks import METRIC_SINKS, missing_packages

    out = []
    valid = ", ".join(METRIC_SINKS)
    for name in cfg.logger.backends:
        if is_spec(name):
            out.extend(METRIC_SINKS.problems(name, roots))
        elif name not in METRIC_SINKS:
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
