"""A model folder the run can use: ``model.path`` loads, and its tokenizer has what
the run needs.

The recipe check (``nexrl.driver.modeling.checks.model_folder``, so ``--check`` too) and the
driver's model preparation both call these, so a folder that cannot work fails
before any cluster starts with one line naming the file and the fix, instead of a
traceback from the trainer, the server or the SFT encoder later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexrl.core.errors import NexrlError

__all__ = [
    "ModelSetupError",
    "chat_template_needed",
    "check_model_folder",
    "check_vocabulary",
    "load_tokenizer",
    "require_chat_template",
    "tokenizer_field",
]


class ModelSetupError(RuntimeError, NexrlError):
    """The initial model cannot be found or built (the message names the recipe field)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def check_model_folder(model: Path) -> Any:
    """The folder's transformers config; ``ModelSetupError`` naming the file when
    ``model.path`` cannot be loaded: a ``config.json`` that is not JSON or that
    transformers cannot read, no weights, or a damaged safetensors file (only its
    header is read, not the tensors)."""
    field = f"model.path: {model}"
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelSetupError(
            f"{field}/config.json cannot be read as JSON ({_first_line(exc)}); restore the "
            f"model's config.json"
        ) from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ModelSetupError(
            f"{field}/config.json has no model_type; it must be a Hugging Face model config"
        )
    from transformers import AutoConfig

    try:
        loaded = AutoConfig.from_pretrained(str(model), local_files_only=True)
    except Exception as exc:  # ValueError (unknown model_type), KeyError, OSError
        raise ModelSetupError(
            f"{field}/config.json cannot be loaded by transformers: {_first_line(exc)}"
        ) from None
    shards = sorted(model.glob("*.safetensors"))
    if not shards and not any(model.glob("pytorch_model*.bin")):
        raise ModelSetupError(
            f"{field} has no weights (model.safetensors, model-*.safetensors or "
            f"pytorch_model.bin); point it at a folder written by save_pretrained"
        )
    from safetensors import safe_open

    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt"):
                pass
        except Exception as exc:  # SafetensorError: truncated, or not safetensors at all
            raise ModelSetupError(
                f"{field}: {shard.name} is damaged ({_first_line(exc)}); copy the model "
                f"folder again"
            ) from None
    return loaded


def tokenizer_field(cfg: Any) -> str:
    """The recipe field that names the tokenizer's folder."""
    return "model.tokenizer_path" if cfg.model.tokenizer_path else "model.path"


def load_tokenizer(tokenizer_dir: Path, field: str = "model.path") -> Any:
    """The run's tokenizer; ``ModelSetupError`` naming ``field`` and the folder when
    it holds none transformers can load (e.g. a model saved without its tokenizer)."""
    from transformers import AutoTokenizer

    fix = (
        "save the tokenizer into that folder (tokenizer.save_pretrained) or set "
        "model.tokenizer_path to a folder that has one"
    )
    try:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except Exception as exc:  # OSError, ValueError, a tokenizer converter's error
        raise ModelSetupError(
            f"{field}: no tokenizer could be loaded from {tokenizer_dir} ({_first_line(exc)}); "
            f"{fix}"
        ) from None
    # transformers builds an empty tokenizer of the config's type when the folder has no
    # tokenizer files at all (Qwen2: one token, every text encoded as nothing)
    if len(tok) < 2:
        raise ModelSetupError(
            f"{field}: {tokenizer_dir} has no tokenizer files (tokenizer.json, "
            f"tokenizer_config.json, vocab files), and the tokenizer transformers made "
            f"without them encodes text as nothing; {fix}"
        )
    return tok


def check_vocabulary(tok: Any, vocab_size: int | None, tokenizer_dir: Path, field: str) -> None:
    """``ModelSetupError`` when the tokenizer has ids the model has no embedding for
    (a tokenizer of another model): the server and the trainer would fail on them."""
    if vocab_size is not None and len(tok) > vocab_size:
        raise ModelSetupError(
            f"{field}: the tokenizer in {tokenizer_dir} has {len(tok)} tokens but the model "
            f"(model.path config.json vocab_size) embeds {vocab_size}: they are not a pair; "
            f"use the tokenizer saved with the model"
        )


def chat_template_needed(cfg: Any) -> str | None:
    """Why the run needs the tokenizer's chat template, or None. SFT encodes every
    conversation with it. In RL the built-in rollout workers send chat requests that
    the embedded server formats with the model folder's template; an engine at
    ``base_urls`` or started by ``command`` has its own, and a custom worker may call
    ``complete()`` instead."""
    if cfg.mode == "sft":
        return "SFT encodes each conversation with it"
    rw, svc = cfg.rollout_worker, cfg.service.inference_service
    if rw.custom_worker or svc.base_urls or svc.command:
        return None
    return (
        f"rollout_worker.type={rw.type} sends chat requests that the embedded inference "
        f"server formats with it"
    )


def require_chat_template(tok: Any, tokenizer_dir: Path, why: str, field: str) -> None:
    """``ModelSetupError`` when the tokenizer has no chat template and ``why`` (the
    part of the run that needs one) says it must."""
    if not getattr(tok, "chat_template", None):
        raise ModelSetupError(
            f"{field}: the tokenizer in {tokenizer_dir} has no chat template, and {why}; "
            f"add one (a chat_template.jinja file in that folder, or tokenizer.chat_template "
            f"saved with save_pretrained), or set model.tokenizer_path to a folder whose "
            f"tokenizer has one"
        )
