"""LoRA adapters on the trainer's model (``trainer.lora``, through PEFT).

With ``trainer.lora.rank`` r > 0 every target linear layer ``W`` (d_out x d_in)
gets a low-rank update that alone trains::

    h = W x + (alpha / r) * B A dropout(x)      A: r x d_in (Kaiming init), B: d_out x r (zeros)

so the adapted policy starts equal to the base model, and the optimizer holds
only ``A`` and ``B`` (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
Language Models", arXiv:2106.09685; PEFT's ``LoraConfig``). Snapshots hold only
the adapter (``adapter_model.safetensors`` + ``adapter_config.json``, PEFT's
layout); the embedded server merges it into its copy of the base model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from nexrl.core.config.sections.trainer import TrainerConfig

__all__ = ["adapter_config", "adapter_state_dict", "apply_lora", "lora_enabled"]


def lora_enabled(trainer_cfg: TrainerConfig) -> bool:
    """Whether ``trainer.lora.rank`` > 0."""
    return trainer_cfg.lora.rank > 0


def apply_lora(model: torch.nn.Module, trainer_cfg: Any) -> torch.nn.Module:
    """``model`` wrapped with fresh LoRA adapters; only the adapters require grad."""
    from peft import LoraConfig, get_peft_model

    lora = trainer_cfg.lora
    alpha: Any = float(lora.alpha)  # PEFT types it int; the scale alpha / r is a float
    config = LoraConfig(
        r=int(lora.rank),
        lora_alpha=alpha,
        lora_dropout=float(lora.dropout),
        target_modules=list(lora.target_modules),
        modules_to_save=list(getattr(lora, "modules_to_save", [])) or None,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model: torch.nn.Module = get_peft_model(model, config)
    return peft_model


def adapter_state_dict(
    model: torch.nn.Module, full_state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The adapter's tensors out of ``full_state`` (the PEFT model's consolidated state
    dict), named as PEFT saves them (``...lora_A.weight``, no adapter name)."""
    from peft import get_peft_model_state_dict

    return dict(get_peft_model_state_dict(model, state_dict=full_state))


def adapter_config(model: torch.nn.Module, base_model_path: str) -> dict[str, Any]:
    """``adapter_config.json`` content of the model's adapter, naming its base folder."""
    config: Any = model.peft_config["default"]  # type: ignore[index]
    out: dict[str, Any] = config.to_dict()
    out["base_model_name_or_path"] = base_model_path
    for key, value in list(out.items()):
        if isinstance(value, set):
            out[key] = sorted(value)
    return out
