"""Trainer checkpoints: engine state, trainer state and RNG, never a corrupt ``latest``.

Layout under the checkpoint root (``<output_dir>/checkpoints``)::

    step_20/
        engine/            the engine's own checkpoint (DeepSpeed ``save_checkpoint``
                           with tag ``engine``: model, optimizer - ZeRO partitions one
                           file per rank - and LR scheduler)
        critic/            another engine of the trainer's, saved the same way under its
                           own tag (the value model of ``self_hosted_ppo``; ``extra``)
        rng_rank<r>.pt     python / numpy / torch (/ cuda) RNG states of rank r
        trainer_state.pt   step, policy version, optimizer steps, KL controller, extra
        meta.json          written last: marks the folder complete; holds the size
                           and sha256 of every other file ("files")
    latest                 text file naming the newest complete folder, replaced atomically
    .tmp-step_30/          a save in progress, or one a crash interrupted

Saving is collective (every rank calls :meth:`CheckpointManager.save`): all
ranks write into ``.tmp-step_N``; rank 0 then writes the trainer state,
``fsync``s the tree, writes ``meta.json``, renames the folder to ``step_N`` and
replaces ``latest``. A process killed (or a write failing: disk full, file too
large) at any point leaves ``latest`` naming the previous complete checkpoint;
the stray ``.tmp-*`` folder (or ``.latest.tmp-*`` file) is removed by the next
save. Readers trust a folder
only when its ``meta.json`` exists; if ``latest`` is missing or names an
incomplete folder, the newest complete ``step_*`` is used.

Corruption (a truncated or altered file in a committed folder: a disk or file-system
fault, a partial copy): before a checkpoint is resumed from, every file is checked
against the sizes and sha256 checksums in its ``meta.json``. A folder that fails
is skipped with one warning line naming it, the file and the checkpoint used
instead (the newest one that passes); when none passes the resume stops with a
:class:`CheckpointError` rather than silently starting at step 1. Checkpoints
written before checksums were recorded (no ``files`` in ``meta.json``) are
trusted as they are.

Resume modes (``resume.mode``): ``disable`` (fresh run), ``auto`` (the latest
complete checkpoint under the root, or fresh when none), ``from_path`` (a
checkpoint folder, or a checkpoint root whose latest is taken; an error when it
is not complete).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from nexrl.core.errors import NexrlError
from nexrl.core.util.checksums import check_tree, tree_checksums
from nexrl.core.util.files import (
    atomic_write_bytes,
    fsync_tree,
    is_temp_name,
    remove_tree,
    replace_dir,
)
from nexrl.core.util.logfile import SAID_BY_THE_DRIVER

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "get_rng_state",
    "is_complete",
    "set_rng_state",
    "verify_checkpoint",
]

logger = logging.getLogger(__name__)

META_FILE = "meta.json"
LATEST_FILE = "latest"
ENGINE_TAG = "engine"
_STEP_RE = re.compile(r"^step_(\d+)$")
RESUME_MODES = ("disable", "auto", "from_path")


class CheckpointError(RuntimeError, NexrlError):
    """A checkpoint could not be written or read; the message names the path and the fix."""


class CheckpointEngine(Protocol):
    """The part of a training engine a checkpoint needs (see ``nexrl.trainer.engine``)."""

    rank: int
    world_size: int

    def save_checkpoint(self, save_dir: str, tag: str) -> None: ...

    def load_checkpoint(self, load_dir: str, tag: str) -> None: ...

    def barrier(self) -> None: ...

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor: ...


def get_rng_state() -> dict[str, Any]:
    """Python, numpy, torch CPU (and CUDA, when present) generator states."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def is_complete(path: str | Path) -> bool:
    """A checkpoint folder is complete when its ``meta.json`` exists and parses."""
    try:
        json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    return True


def verify_checkpoint(path: str | Path) -> str | None:
    """``None`` when ``path`` is complete and every file matches the checksums of its
    ``meta.json`` (or it has none: written before they were recorded); else why not."""
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError):
        return f"{path / META_FILE} is missing or unreadable (an incomplete checkpoint)"
    files = meta.get("files") if isinstance(meta, dict) else None
    if not files:
        return None
    return check_tree(path, files)


class CheckpointManager:
    """Saves and finds checkpoints under ``root``.

    Args:
        root: checkpoint folder (created on the first save).
        keep: complete checkpoints kept (``None`` = all); older ones are deleted
            after a successful save.
    """

    def __init__(self, root: str | Path, *, keep: int | None = None) -> None:
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be >= 1 or None, got {keep!r}")
        self.root = Path(root)
        self.keep = keep
        self.skipped: list[str] = []  # corrupted checkpoints the last resolve passed over

    # -- finding --------------------------------------------------------------
    def complete(self) -> list[tuple[int, Path]]:
        """Complete checkpoints ``(step, path)``, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in self.root.iterdir():
            m = _STEP_RE.match(entry.name)
            if m and entry.is_dir() and is_complete(entry):
                found.append((int(m.group(1)), entry))
        return sorted(found)

    def latest(self) -> Path | None:
        """The folder ``latest`` names if complete, else the newest complete one, else None."""
        try:
            name = (self.root / LATEST_FILE).read_text().strip()
        except OSError:
            name = ""
        if name and _STEP_RE.match(name) and is_complete(self.root / name):
            return self.root / name
        found = self.complete()
        return found[-1][1] if found else None

    def latest_verified(self) -> Path | None:
        """The newest complete checkpoint whose files match their checksums (``latest``
        first), None when there is none at all.

        Corrupted ones are skipped with one warning line naming them and the one used
        instead; when every complete checkpoint is corrupted, :class:`CheckpointError`.
        """
        self.skipped = []
        first = self.latest()
        if first is None:
            return None
        candidates = [first] + [p for _, p in reversed(self.complete()) if p != first]
        bad: list[str] = []
        for path in candidates:
            problem = verify_checkpoint(path)
            if problem is None:
                if bad:
                    logger.warning(  # a run's driver shows it too (its resume note)
                        "corrupted checkpoint skipped: %s; resuming from %s instead",
                        "; ".join(bad),
                        path,
                        extra=SAID_BY_THE_DRIVER,
                    )
                    self.skipped = list(bad)
                return path
            bad.append(f"{path} ({problem})")
        raise CheckpointError(
            f"every checkpoint under {str(self.root)!r} is corrupted: {'; '.join(bad)}; "
            "restore them from a copy, or start over with resume.mode: disable (or another "
            "output_dir)"
        )

    def resolve(self, mode: str, path: str | Path | None = None) -> Path | None:
        """The checkpoint to resume from for ``resume.mode`` (None = start fresh)."""
        if mode == "disable":
            return None
        if mode == "auto":
            return self.latest_verified()
        if mode == "from_path":
            if not path:
                raise CheckpointError("resume.mode is 'from_path' but resume.path is not set")
            p = Path(path)
            if is_complete(p):
                problem = verify_checkpoint(p)
                if problem is not None:
                    raise CheckpointError(
                        f"resume.path {str(p)!r} is corrupted: {problem}; point resume.path at "
                        "an earlier step_N folder (or its checkpoint root, whose newest good "
                        "checkpoint is then used)"
                    )
                return p
            other = CheckpointManager(p)
            found = other.latest_verified() if p.is_dir() else None
            self.skipped = other.skipped
            if found is None:
                raise CheckpointError(
                    f"resume.path {str(p)!r} is not a complete checkpoint (no {META_FILE}) and "
                    "holds none; point it at a step_N folder or a checkpoint root, or use "
                    "resume.mode: auto"
                )
            return found
        raise CheckpointError(f"resume.mode {mode!r} is not one of {', '.join(RESUME_MODES)}")

    # -- saving ---------------------------------------------------------------
    def save(
        self,
        engine: CheckpointEngine,
        step: int,
        trainer_state: dict[str, Any],
        extra: Mapping[str, CheckpointEngine] | None = None,
    ) -> Path | None:
        """Write checkpoint ``step_{step}`` (collective: every rank calls it); ``extra``
        engines (tag -> engine) are saved beside the main one under their tags.

        Returns the folder on rank 0 (None elsewhere). Raises
        :class:`CheckpointError` on every rank when rank 0 could not commit it;
        ``latest`` is then unchanged.
        """
        name = f"step_{step}"
        tmp, final = self.root / f".tmp-{name}", self.root / name
        if engine.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for entry in self.root.iterdir():  # leftovers of interrupted saves
                if entry.name.startswith((".tmp-", ".trash-")) or is_temp_name(entry.name):
                    remove_tree(entry)
            tmp.mkdir()
        engine.barrier()
        engine.save_checkpoint(str(tmp), ENGINE_TAG)
        for tag, other in (extra or {}).items():
            other.save_checkpoint(str(tmp), tag)
        torch.save(get_rng_state(), tmp / f"rng_rank{engine.rank}.pt")
        engine.barrier()
        error = ""
        if engine.rank == 0:
            try:
                self._commit(tmp, final, step, engine.world_size, trainer_state)
            except Exception as exc:  # disk full, file too large, ...
                remove_tree(tmp)
                error = f"{type(exc).__name__}: {exc}"
        failed = engine.all_reduce_sum(torch.tensor([1.0 if error else 0.0]))
        if float(failed.sum()) > 0:
            raise CheckpointError(
                f"writing checkpoint {str(final)!r} failed ({error or 'on rank 0'}); "
                f"'latest' still names the previous checkpoint"
            )
        return final if engine.rank == 0 else None

    def _commit(
        self, tmp: Path, final: Path, step: int, world_size: int, trainer_state: dict[str, Any]
    ) -> None:
        torch.save(trainer_state, tmp / "trainer_state.pt")
        num_bytes = fsync_tree(tmp)
        meta = {
            "step": step,
            "policy_version": trainer_state.get("policy_version"),
            "world_size": world_size,
            "bytes": num_bytes,
            "time": time.time(),
            "files": tree_checksums(tmp, exclude={META_FILE}),
        }
        atomic_write_bytes(tmp / META_FILE, json.dumps(meta, indent=2).encode())
        replace_dir(tmp, final)
        atomic_write_bytes(self.root / LATEST_FILE, f"{final.name}\n".encode())
        try:
            self.prune()
        except OSError as exc:  # the checkpoint is committed; housekeeping can wait
            logger.warning("pruning old checkpoints under %s failed: %s", self.root, exc)

    def prune(self) -> list[int]:
        """Delete complete checkpoints beyond the newest ``keep``; the steps deleted."""
        if self.keep is None:
            return []
        current = self.latest()
        found = self.complete()
        removed = []
        for step, path in found[: max(0, len(found) - self.keep)]:
            if current is not None and path == current:
                continue
            remove_tree(path)
            removed.append(step)
        return removed

    # -- loading --------------------------------------------------------------
    def load(
        self,
        engine: CheckpointEngine,
        path: str | Path,
        extra: Mapping[str, CheckpointEngine] | None = None,
    ) -> dict[str, Any]:
        """Restore engine state and this rank's RNG from ``path`` (collective); returns the
        trainer state. An ``extra`` engine whose tag the checkpoint lacks (it was written
        by a trainer without it) keeps its fresh state, with one warning line."""
        path = Path(path)
        if not is_complete(path):
            raise CheckpointError(f"checkpoint {str(path)!r} is incomplete (no {META_FILE})")
        meta = json.loads((path / META_FILE).read_text())
        saved_world = int(meta.get("world_size", engine.world_size))
        if saved_world != engine.world_size:
            raise CheckpointError(
                f"checkpoint {str(path)!r} was written by {saved_world} trainer rank(s) but "
                f"this run has trainer.world_size={engine.world_size}; resume with the same "
                "world size"
            )
        engine.load_checkpoint(str(path), ENGINE_TAG)
        for tag, other in (extra or {}).items():
            if (path / tag).is_dir():
                other.load_checkpoint(str(path), tag)
            elif engine.rank == 0:
                logger.warning(
                    "checkpoint %s has no %s/ (written by a trainer without it): the %s "
                    "starts fresh",
                    path,
                    tag,
                    tag,
                )
        rng_file = path / f"rng_rank{engine.rank}.pt"
        if rng_file.exists():
            set_rng_state(torch.load(rng_file, weights_only=False))
        state: dict[str, Any] = torch.load(path / "trainer_state.pt", weights_only=False)
        return state
