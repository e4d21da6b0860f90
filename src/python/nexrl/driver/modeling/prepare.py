"""The initial policy of a run: ``model.path`` as given, or the recipe's tiny model
built (and warm-started on demonstrations) under ``<output_dir>/model`` once.

Runs in the driver before the cluster starts (``nexrl.driver.controller.build``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nexrl.core.config.paths import resolve_path
from nexrl.core.util.adapters import is_adapter_snapshot
from nexrl.driver.modeling.cache import build_into, cached_build, tiny_model_key
from nexrl.driver.modeling.folder import ModelSetupError, check_model_folder
from nexrl.driver.modeling.parent import record_parent, resolve_model_source

__all__ = ["ModelSetupError", "prepare_model"]

logger = logging.getLogger(__name__)


def prepare_model(
    cfg: Any,
    output_dir: Path,
    roots: Sequence[Path] = (),
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[Path, Path]:
    """``(model_dir, tokenizer_dir)`` of the initial policy: ``model.path`` (another
    run's folder or snapshot resolved to its snapshot, recorded in
    ``<output_dir>/parent.json``: ``nexrl.driver.modeling.parent``), or
    the tiny model of ``model.tiny`` (warm-started on ``model.tiny.warm_start`` demos if
    any) written to ``<output_dir>/model`` once (copied from the cache of built models,
    ``nexrl.driver.modeling.cache``, when an earlier run built the same one). It is built in a
    temporary folder and renamed when complete, so a run killed while building never
    finds half a model.
    Relative demonstration paths are looked up in ``roots`` (default: the working dir);
    ``should_stop`` can interrupt the warm start (``KeyboardInterrupt``; nothing kept)."""
    if cfg.model.path:
        # another run's folder or snapshot: its verified snapshot, recorded in parent.json
        source = resolve_model_source(cfg.model.path, _found(cfg.model.path, roots))
        model = source.path
        if not (model / "config.json").is_file():
            lora = " (a LoRA adapter snapshot is not a model)" if is_adapter_snapshot(model) else ""
            raise ModelSetupError(
                f"model.path: {model} has no config.json{lora}; point it at a Hugging Face "
                "model folder"
            )
        tok = Path(cfg.model.tokenizer_path) if cfg.model.tokenizer_path else model
        check_model_folder(model)  # (the recipe check did too; a folder can change since)
        if source.parent is not None:
            from nexrl.core.weights.checkpoint import CheckpointManager  # (imports torch)

            resumed = CheckpointManager(output_dir / "checkpoints").latest() is not None
            record_parent(output_dir, source.parent, resumed)
        if cfg.model.tiny.warm_start.data_files:
            logger.warning("model.path is set: model.tiny.warm_start (tiny model only) is ignored")
        return model, tok
    tiny = cfg.model.tiny
    if not tiny.vocab:
        raise ModelSetupError(
            "model.tiny.vocab is empty: give model.path (a Hugging Face model folder) or the "
            "tiny model's vocabulary"
        )
    out = output_dir / "model"
    if (out / "config.json").is_file():
        return out, out
    demos = _demo_files(tiny.warm_start.data_files, roots or [Path.cwd()])

    def build(folder: Path) -> None:
        _build_tiny(tiny, folder, demos, progress, should_stop)

    # (an existing folder without config.json is unfinished: replaced)
    if tiny.cache:
        cached_build(tiny_model_key(tiny, demos), out, build)
    else:
        build_into(out, build)
    return out, out


def _found(value: str, roots: Sequence[Path]) -> Path:
    """``model.path`` where the recipe check finds it (the working dir, then the
    recipe's folder), else as given."""
    return resolve_path(value, roots or [Path.cwd()]) or Path(value)


def _build_tiny(
    tiny: Any,
    tmp: Path,
    demos: list[Path],
    progress: bool | None,
    should_stop: Callable[[], bool] | None,
) -> None:
    from nexrl.core.conversations import WarmStartError
    from nexrl.driver.modeling.tiny import save_tiny_model
    from nexrl.driver.modeling.warm_start import warm_start_dir

    save_tiny_model(
        tmp,
        vocab=list(tiny.vocab),
        seed=int(tiny.seed),
        byte_fallback=bool(tiny.byte_fallback),
        added_tokens=[str(t) for t in tiny.added_tokens],
        init_std=float(tiny.init_std),
        hidden_size=int(tiny.hidden_size),
        num_layers=int(tiny.num_layers),
        num_heads=int(tiny.num_heads),
        num_kv_heads=int(tiny.num_kv_heads),
        intermediate_size=int(tiny.intermediate_size),
    )
    if not demos:
        return
    ws = tiny.warm_start
    logger.info(
        "warm start of the tiny model: %d steps on %s",
        int(ws.steps),
        ", ".join(map(str, demos)),
    )
    try:
        losses = warm_start_dir(
            tmp,
            demos,
            steps=int(ws.steps),
            lr=float(ws.lr),
            batch_size=int(ws.batch_size),
            seed=int(tiny.seed),
            progress=progress,
            field="model.tiny.warm_start.data_files",
            should_stop=should_stop,
        )
    except WarmStartError as exc:
        raise ModelSetupError(str(exc)) from None
    logger.info("warm start: %d steps, loss %.3f -> %.3f", len(losses), losses[0], losses[-1])


def _demo_files(files: Sequence[str], roots: Sequence[Path]) -> list[Path]:
    out = []
    for f in files:
        path = resolve_path(str(f), roots)
        if path is None:
            raise ModelSetupError(f"model.tiny.warm_start.data_files: '{f}' not found")
        out.append(path)
    return out
