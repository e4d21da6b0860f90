"""The run folder ``<output_dir>/`` and the initial model.

::

    runs/<experiment_name>/
      config.yaml         the resolved recipe of the (latest) start
      model/              the tiny model built from config (model.path: null)
      pool.zarr/          trajectories              snapshots/vN/   published weights
      checkpoints/        trainer + controller      batches/        the batch being trained
      metrics.jsonl       one row per step          plots/          reward curve
      logs/               driver.log, inference.log summary.json    at the end

A fresh run (``resume.mode: disable``) refuses a folder that already holds a
run, so nothing written is overwritten; ``auto`` continues it from its newest
checkpoint. A run killed before its first checkpoint has nothing to continue
from: its pool and metrics are moved to ``abandoned-<time>/`` (kept, not
deleted) and the run starts over.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from nexrl.errors import NexrlError
from nexrl.plugins import resolve_path
from nexrl.util.files import replace_dir
from nexrl.weights.checkpoint import CheckpointManager

__all__ = ["RunDir", "RunDirError", "prepare_model"]

logger = logging.getLogger(__name__)


class RunDirError(RuntimeError, NexrlError):
    """The run folder cannot be used as asked (the message says what to do)."""


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def batches(self) -> Path:
        return self.root / "batches"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    def has_checkpoint(self) -> bool:
        return CheckpointManager(self.checkpoints).latest() is not None

    def prepare(self, cfg: Any, pool_store: str) -> None:
        """Create the folders, apply the resume policy, write ``config.yaml``."""
        mode = str(cfg.resume.mode)
        pool = Path(pool_store)
        holds_run = self.has_checkpoint() or pool.exists() or self.metrics.exists()
        if mode == "disable" and holds_run:
            raise RunDirError(
                f"{self.root} already holds a run (checkpoints, pool or metrics); continue it "
                "with resume.mode=auto, or start a new one with another experiment_name "
                "(or output_dir)"
            )
        if mode == "auto" and holds_run and not self.has_checkpoint():
            self._abandon([pool, self.metrics])
        for d in (self.root, self.logs, self.plots, self.batches):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    def _abandon(self, paths: list[Path]) -> None:
        dest = self.root / f"abandoned-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.mkdir(parents=True, exist_ok=True)
        for p in paths:
            if p.exists() and p.is_relative_to(self.root):
                shutil.move(str(p), dest / p.name)
        logger.warning(
            "%s: the previous run stopped before its first checkpoint; its pool and metrics "
            "were moved to %s and the run starts over",
            self.root,
            dest,
        )


def prepare_model(
    cfg: Any,
    run: RunDir,
    roots: Sequence[Path] = (),
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[Path, Path]:
    """``(model_dir, tokenizer_dir)`` of the initial policy: ``model.path`` as given, or
    the tiny model of ``model.tiny`` (warm-started on ``model.tiny.warm_start`` demos if
    any) written to ``<output_dir>/model`` once. It is built in a temporary folder and
    renamed when complete, so a run killed while building never finds half a model.
    Relative demonstration paths are looked up in ``roots`` (default: the working dir);
    ``should_stop`` can interrupt the warm start (``KeyboardInterrupt``; nothing kept)."""
    if cfg.model.path:
        model = Path(cfg.model.path)
        if not (model / "config.json").is_file():
            raise RunDirError(
                f"model.path: {model} has no config.json; point it at a Hugging Face model folder"
            )
        tok = Path(cfg.model.tokenizer_path) if cfg.model.tokenizer_path else model
        if cfg.model.tiny.warm_start.data_files:
            logger.warning("model.path is set: model.tiny.warm_start (tiny model only) is ignored")
        return model, tok
    tiny = cfg.model.tiny
    if not tiny.vocab:
        raise RunDirError(
            "model.tiny.vocab is empty: give model.path (a Hugging Face model folder) or the "
            "tiny model's vocabulary"
        )
    out = run.root / "model"
    if (out / "config.json").is_file():
        return out, out
    demos = _demo_files(tiny.warm_start.data_files, roots or [Path.cwd()])
    tmp = run.root / f"model.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _build_tiny(tiny, tmp, demos, progress, should_stop)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, out)  # (an existing folder without config.json is unfinished)
    return out, out


def _build_tiny(
    tiny: Any,
    tmp: Path,
    demos: list[Path],
    progress: bool | None,
    should_stop: Callable[[], bool] | None,
) -> None:
    from nexrl.modeling import save_tiny_model
    from nexrl.modeling.warm_start import WarmStartError, warm_start_dir

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
        raise RunDirError(str(exc)) from None
    logger.info("warm start: %d steps, loss %.3f -> %.3f", len(losses), losses[0], losses[-1])


def _demo_files(files: Sequence[str], roots: Sequence[Path]) -> list[Path]:
    out = []
    for f in files:
        path = resolve_path(str(f), roots)
        if path is None:
            raise RunDirError(f"model.tiny.warm_start.data_files: '{f}' not found")
        out.append(path)
    return out
