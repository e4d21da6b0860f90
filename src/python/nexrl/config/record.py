"""The recipe as a run folder records it (``config.yaml``): every value resolved,
except those the recipe takes from the environment (``${oc.env:VAR}``), which stay
written as that interpolation. Secrets (API keys, tokens) belong in the environment
(docs/user-guide.md), so they never land in the run folder, which people share."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["recorded_yaml"]

ENV = "${oc.env:"


def _keep_env(raw: Any, resolved: Any) -> Any:
    if isinstance(raw, dict) and isinstance(resolved, dict):
        return {k: _keep_env(raw.get(k), v) for k, v in resolved.items()}
    if isinstance(raw, list) and isinstance(resolved, list) and len(raw) == len(resolved):
        return [_keep_env(r, v) for r, v in zip(raw, resolved, strict=True)]
    if isinstance(raw, str) and ENV in raw:
        return raw  # where the value comes from, not the value
    return resolved


def recorded_yaml(cfg: DictConfig) -> str:
    """``cfg`` as YAML, resolved but for environment values (see the module doc)."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    kept = OmegaConf.create(_keep_env(raw, resolved))
    return str(OmegaConf.to_yaml(kept, resolve=False))
