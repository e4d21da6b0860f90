"""The recipe as a run folder records it (``config.yaml``): every value resolved,
except those the recipe takes from the environment (``${oc.env:VAR}``), which stay
written as that interpolation. Secrets (API keys, tokens) belong in the environment
(docs/user-guide.md), so they never land in the run folder, which people share."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "MODEL_KEYS",
    "another_run",
    "changed_fields",
    "model_changes",
    "recorded_config",
    "recorded_yaml",
]


def another_run(cfg: Any) -> str:
    """How to point a command at a new run folder, for error lines: ``another
    experiment_name (or output_dir)`` when ``output_dir`` follows ``experiment_name``
    (the default ``runs/${experiment_name}``), else ``another output_dir`` (set outright,
    a new experiment_name would not move it)."""
    try:
        raw = OmegaConf.to_container(cfg, resolve=False)
        follows = "experiment_name" in str(raw.get("output_dir", ""))  # type: ignore[union-attr]
    except Exception:  # not a config (a plain mapping in a test): the general advice
        follows = True
    if follows:
        return "another experiment_name (or output_dir)"
    return (
        "another output_dir (this recipe sets it outright: a new experiment_name would not move it)"
    )


ENV = "${oc.env:"


def _keep_env(raw: Any, resolved: Any) -> Any:
    if isinstance(raw, dict) and isinstance(resolved, dict):
        return {k: _keep_env(raw.get(k), v) for k, v in resolved.items()}
    if isinstance(raw, list) and isinstance(resolved, list) and len(raw) == len(resolved):
        return [_keep_env(r, v) for r, v in zip(raw, resolved, strict=True)]
    if isinstance(raw, str) and ENV in raw:
        return raw  # where the value comes from, not the value
    return resolved


def recorded_config(cfg: DictConfig) -> dict[str, Any]:
    """``cfg`` as a plain dict, resolved but for environment values (see the module doc):
    what metric sinks that keep the recipe (mlflow params, the wandb config) are given."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    kept = _keep_env(raw, resolved)
    return kept if isinstance(kept, dict) else {}


def recorded_yaml(cfg: DictConfig) -> str:
    """``cfg`` as YAML, resolved but for environment values (see the module doc)."""
    kept = OmegaConf.create(recorded_config(cfg))
    return str(OmegaConf.to_yaml(kept, resolve=False))


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): node}


def changed_fields(old_yaml: str, new_yaml: str) -> list[str]:
    """The fields of two recorded recipes that differ, as ``key: old -> new`` (a field
    only one of them has shows ``(unset)`` on the other side), sorted by key."""
    old = _flat(OmegaConf.to_container(OmegaConf.create(old_yaml)) or {})
    new = _flat(OmegaConf.to_container(OmegaConf.create(new_yaml)) or {})
    unset = "(unset)"
    return [
        f"{k}: {old.get(k, unset)} -> {new.get(k, unset)}"
        for k in sorted(old.keys() | new.keys())
        if old.get(k, unset) != new.get(k, unset)
    ]


# Settings that make another model: its source, shapes, tokenizer and vocabulary
# (``model.*``), and the LoRA adapters' parameters (``trainer.lora.*``). A checkpoint
# of one cannot continue as the other.
MODEL_KEYS = ("model.", "trainer.lora.")


def model_changes(old_yaml: str, new_yaml: str) -> list[str]:
    """``changed_fields`` of the settings that make another model (``MODEL_KEYS``)."""
    return [c for c in changed_fields(old_yaml, new_yaml) if c.startswith(MODEL_KEYS)]
