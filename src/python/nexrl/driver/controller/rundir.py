"""The run folder ``<output_dir>/`` (its layout and the resume policy).

The initial model is built by ``nexrl.driver.modeling.prepare``.

::

    runs/<experiment_name>/
      config.yaml         the resolved recipe of the latest start or accepted resume
                          (${oc.env:…} kept)
      model/              the tiny model built from config (model.path: null)
      pool.zarr/          trajectories              snapshots/vN/   published weights
      checkpoints/        trainer + controller      batches/        SFT's batch (RL: none)
      metrics.jsonl       one row per step          plots/          reward curve
      logs/               driver.log, inference.log summary.json    at the end
      parent.json         model.path was another run's folder or snapshot: which one
                          (run, experiment, version, checksum; nexrl.driver.modeling.parent)

One run at a time: a run holds an exclusive lock on ``<output_dir>/.lock`` (``flock``,
released when its process ends, however it ends) from before the resume policy is
applied until it has shut down; a second command on the same folder stops at once,
naming the folder and the pid that holds it, with nothing of the first run touched.

A fresh run (``resume.mode: disable``) refuses a folder that already holds a
run, so nothing written is overwritten; ``auto`` continues it from its newest
checkpoint. A run killed before its first checkpoint has nothing to continue
from: its pool and metrics are moved to ``abandoned-<time>/`` (kept, not
deleted) and the run starts over.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nexrl.core.config.record import changed_fields
from nexrl.core.errors import NexrlError
from nexrl.core.util.files import atomic_write_text
from nexrl.core.util.run_parent import PARENT_FILE
from nexrl.core.weights.checkpoint import CheckpointManager

if TYPE_CHECKING:
    from nexrl.driver.recipe import Recipe

__all__ = ["LOCK_FILE", "RunDir", "RunDirError"]

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"


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
        """SFT's batch files (the RL step has none: its rows stay in the pool); made by
        the SFT loop when it starts."""
        return self.root / "batches"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    def has_checkpoint(self) -> bool:
        return CheckpointManager(self.checkpoints).latest() is not None

    def checkpoint_step(self) -> int:
        """The step a resume continues from (the checkpoint ``latest`` names, else the
        newest complete one: ``CheckpointManager.latest``), 0 when there is none. A
        step folder renamed into place before ``latest`` moved to it is not that step."""
        found = CheckpointManager(self.checkpoints).latest()
        return int(found.name.split("_", 1)[1]) if found is not None else 0

    def finished(self, recipe: Recipe) -> str | None:
        """What to say when a ``resume.mode=auto`` rerun has nothing to train: its newest
        checkpoint is at or past ``trainer.total_train_steps``. None otherwise."""
        spec = recipe.spec
        if spec.resume.mode != "auto":
            return None
        total, step = spec.trainer.total_train_steps, self.checkpoint_step()
        if step < total:
            return None
        return (
            f"nexrl: {self.root} finished at step {step} (trainer.total_train_steps={total}): "
            "nothing to train; to train on, raise trainer.total_train_steps (resume.mode=auto "
            f"continues from its checkpoint), or start a new run with {recipe.new_run_advice()}"
        )

    def lock(self) -> Callable[[], None]:
        """Take the folder's run lock (creating the folder); returns its release. Raises
        ``RunDirError`` when another process holds it or the folder cannot be written."""
        path = self.root / LOCK_FILE
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._unwritable(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"{self.root} is in use by another run (pid {holder}); wait for it to end, "
                "or give this one another experiment_name (or output_dir)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

        def release() -> None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only descriptor releases the lock

        return release

    def _unwritable(self, exc: OSError) -> RunDirError:
        where = exc.filename or self.root
        return RunDirError(
            f"output_dir {self.root}: cannot write {where} ({exc.strerror or exc}); choose "
            "another output_dir (or experiment_name) or make it writable"
        )

    def prepare(self, recipe: Recipe, pool_store: str) -> None:
        """Create the folders, apply the resume policy, write ``config.yaml``."""
        try:
            self._prepare(recipe, pool_store)
        except OSError as exc:
            raise self._unwritable(exc) from None

    def _prepare(self, recipe: Recipe, pool_store: str) -> None:
        mode = recipe.spec.resume.mode
        pool = Path(pool_store)
        holds_run = self.has_checkpoint() or pool.exists() or self.metrics.exists()
        if mode == "disable" and holds_run:
            raise RunDirError(
                f"{self.root} already holds a run (checkpoints, pool or metrics); continue it "
                f"with resume.mode=auto, or start a new one with {recipe.new_run_advice()}"
            )
        if mode == "auto" and holds_run and not self.has_checkpoint():
            self._abandon([pool, self.metrics])
        for d in (self.root, self.logs, self.plots):
            d.mkdir(parents=True, exist_ok=True)
        if not self.has_checkpoint():  # a resume records its recipe once it is accepted
            self.record_config(recipe)
            # a start over records its parent anew (nexrl.driver.modeling.prepare), if it has one
            (self.root / PARENT_FILE).unlink(missing_ok=True)

    def record_config(self, recipe: Recipe) -> list[str]:
        """Write ``config.yaml`` (no environment values: secrets); the fields that differ
        from the one it replaces (a resume with changed settings), ``key: old -> new``."""
        path = self.root / "config.yaml"
        text = recipe.record_yaml()
        try:
            before = path.read_text()
        except FileNotFoundError:
            before = None
        atomic_write_text(path, text, fsync=False, fsync_parent=False)
        return [] if before is None else changed_fields(before, text)

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
