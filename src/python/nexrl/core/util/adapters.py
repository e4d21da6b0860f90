"""LoRA adapter folders in PEFT's layout (``adapter_config.json`` +
``adapter_model.safetensors``): what a LoRA snapshot is, and the base model it names.
Read by the snapshot publisher, the inference supervisor and the inference engines."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "adapter_base_model", "is_adapter_snapshot"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def is_adapter_snapshot(path: str | Path) -> bool:
    """Whether ``path`` is a LoRA snapshot (``adapter_config.json``, no ``config.json``)."""
    p = Path(path)
    return (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def adapter_base_model(path: str | Path) -> str:
    """The base model folder a LoRA snapshot's ``adapter_config.json`` names
    (``base_model_name_or_path``); ``ValueError`` naming the file otherwise."""
    config = Path(path) / ADAPTER_CONFIG
    try:
        base = json.loads(config.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{config} is unreadable: {exc}") from None
    if not base:
        raise ValueError(f"{config} names no base model (base_model_name_or_path)")
    return str(base)
