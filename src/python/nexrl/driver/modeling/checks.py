"""The model's checks: a model to load or build, and well-formed warm-start demonstrations."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check
from nexrl.core.config.paths import resolve_path

__all__ = ["model_folder", "model_source", "tiny_model_shape", "warm_start_demos"]


@register_check
def model_source(cfg: DictConfig, roots: list[Path]) -> list[str]:
    if cfg.model.path is None and not cfg.model.tiny.vocab:
        return ["model.path: set a model directory, or model.tiny.vocab to build a tiny model"]
    return []


@register_check
def model_folder(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``model.path`` (another run's folder or snapshot: its newest snapshot, checked
    against its checksums, ``nexrl.driver.modeling.parent``) loads (config, weights' headers)
    and its tokenizer has the chat template the run needs (``nexrl.driver.modeling.folder``)."""
    if not cfg.model.path:
        return []
    from nexrl.driver.modeling.folder import (
        ModelSetupError,
        chat_template_needed,
        check_model_folder,
        check_vocabulary,
        load_tokenizer,
        require_chat_template,
        tokenizer_field,
    )
    from nexrl.driver.modeling.parent import resolve_model_source

    found = resolve_path(str(cfg.model.path), roots)
    if found is None:
        return []  # the path check of the field already reports it
    try:  # another run's folder or snapshot: its newest verified snapshot
        model = resolve_model_source(str(cfg.model.path), found).path
    except ModelSetupError as exc:
        return [str(exc)]
    tok_dir = (
        resolve_path(str(cfg.model.tokenizer_path), roots) if cfg.model.tokenizer_path else model
    )
    if tok_dir is None:
        return []  # the path check of the field already reports it
    try:
        config = check_model_folder(model)
        tok = load_tokenizer(tok_dir, tokenizer_field(cfg))
        check_vocabulary(tok, getattr(config, "vocab_size", None), tok_dir, tokenizer_field(cfg))
        why = chat_template_needed(cfg)
        if why:
            require_chat_template(tok, tok_dir, why, tokenizer_field(cfg))
    except ModelSetupError as exc:
        return [str(exc)]
    return []


@register_check
def tiny_model_shape(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Attention heads must split the hidden size, key/value heads the heads."""
    if cfg.model.path is not None:
        return []
    tiny = cfg.model.tiny
    hidden, heads, kv = int(tiny.hidden_size), int(tiny.num_heads), int(tiny.num_kv_heads)
    problems = []
    if hidden % heads:
        problems.append(
            f"model.tiny.num_heads: {heads} heads do not divide hidden_size {hidden}; "
            "pick a divisor of it (e.g. "
            f"{max(d for d in range(1, min(heads, hidden) + 1) if hidden % d == 0)})"
        )
    if heads % kv:
        problems.append(
            f"model.tiny.num_kv_heads: {kv} key/value heads do not divide num_heads {heads}; "
            "pick a divisor of it (1 always works)"
        )
    return problems


@register_check
def warm_start_demos(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """Warm-start demonstrations are for the tiny model and must be well formed."""
    files = list(cfg.model.tiny.warm_start.data_files)
    if not files:
        return []
    field = "model.tiny.warm_start.data_files"
    if cfg.model.path:
        return []  # the tiny model is not built: nothing to warm-start (prepare_model says so)
    from nexrl.core.conversations import WarmStartError, load_demos

    paths = [resolve_path(str(f), roots) for f in files]
    if any(p is None for p in paths):
        return []  # the path check of the field already reports it
    try:
        load_demos([p for p in paths if p is not None], field)
    except WarmStartError as exc:
        return [str(exc)]
    return []
