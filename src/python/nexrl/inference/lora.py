"""The model name rollouts request when the policy is a LoRA adapter that the inference
engine serves by name beside its base model (vLLM).

The embedded server merges each adapter snapshot into its copy of the base model and
serves the result under ``service.inference_service.served_model_name``. vLLM keeps
the base model under that name and serves a loaded adapter under a name of its own
(``/v1/load_lora_adapter``'s ``lora_name``); a request for the base name gets the
base model. With ``trainer.lora`` on a vLLM backend the run loads every adapter
snapshot, the initial one (version 0) included, as ``<served_model_name>-lora`` and
its rollouts request that name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexrl.core.config.sections.runtime import ADAPTER_BACKENDS

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig

__all__ = ["ADAPTER_BACKENDS", "LORA_NAME_SUFFIX", "adapter_model_name", "request_model_name"]

LORA_NAME_SUFFIX = "-lora"


def adapter_model_name(cfg: RecipeConfig) -> str | None:
    """``<served_model_name>-lora`` when the recipe's policy is a LoRA adapter that its
    backend serves by name; None otherwise (full weights, or the embedded server)."""
    svc = cfg.service.inference_service
    if cfg.trainer.lora.rank == 0 or svc.backend not in ADAPTER_BACKENDS:
        return None
    return f"{svc.served_model_name}{LORA_NAME_SUFFIX}"


def request_model_name(cfg: RecipeConfig) -> str:
    """The ``model`` every rollout request names."""
    return adapter_model_name(cfg) or cfg.service.inference_service.served_model_name
