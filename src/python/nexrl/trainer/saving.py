"""What a trainer writes and reads back: snapshots (the weights inference serves),
checkpoints (the whole training state), and the resume from them at start.

``SelfHostedTrainer`` calls these (its methods of the same names are the public
face): ``resume`` when built, ``snapshot_due``/``publish_for_step`` and
``checkpoint_due``/``save_checkpoint`` after each step. All are collective; rank 0
writes the snapshot. ``publish_for_step`` hands the weights over in memory when the
handoff is on (``nexrl.trainer.handoff``), else publishes the snapshot at once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nexrl.core.util.logfile import SAID_BY_THE_DRIVER
from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.handoff import LayoutError, TransportError
from nexrl.core.weights.snapshot import (
    PublishedSnapshot,
    list_snapshots,
    prepare_state_dict,
    verify_snapshot,
)
from nexrl.trainer import handoff
from nexrl.trainer.errors import TrainerError
from nexrl.trainer.lora import adapter_config, adapter_state_dict
from nexrl.trainer.rank_state import TrainerRank

__all__ = [
    "checkpoint_due",
    "publish_for_step",
    "publish_snapshot",
    "resume",
    "save_checkpoint",
    "snapshot_due",
]

logger = logging.getLogger("nexrl.trainer.base")  # the trainer's log lines, as before


def resume(t: TrainerRank) -> None:
    """Load the checkpoint ``spec.resume_mode`` picks (if any); publish its snapshot
    again when it is missing or corrupted; ``t.resume_note`` says what was passed over."""
    spec = t.spec
    manager = t.checkpoints
    if manager is None and spec.resume_mode == "from_path" and spec.resume_path:
        manager = CheckpointManager(spec.resume_path)
    path = manager.resolve(spec.resume_mode, spec.resume_path) if manager else None
    notes = []
    if manager is not None and path is not None:
        t.load_state_dict(manager.load(t.engine, path, t.extra_engines))
        t.resumed_from = path
        if manager.skipped:  # (the manager logged it)
            notes.append(
                f"corrupted checkpoint skipped: {'; '.join(manager.skipped)}; "
                f"resumed from {path} instead"
            )
    if t.publisher is not None:  # snapshots a lost run published past this point
        t.publisher.discard_newer_than(t.policy_version)
    if path is not None and spec.snapshot_dir is not None and t.policy_version > 0:
        problem = None
        if t.rank == 0:
            have = dict(list_snapshots(spec.snapshot_dir))
            snap = have.get(t.policy_version)
            problem = "missing" if snap is None else verify_snapshot(snap)
            if snap is not None and problem is not None:
                notes.append(
                    f"corrupted snapshot v{t.policy_version}: {problem}; published it "
                    f"again from checkpoint {path}"
                )
                logger.warning("%s", notes[-1], extra=SAID_BY_THE_DRIVER)  # (resume note)
        redo = torch.tensor([1.0 if problem is not None else 0.0])
        if float(t.engine.all_reduce_sum(redo).sum()) > 0:
            t.publish_snapshot()
    t.resume_note = " | ".join(notes) or None


def publish_snapshot(t: TrainerRank) -> PublishedSnapshot | None:
    """Publish snapshot ``v{policy_version}`` (collective; rank 0 writes)."""
    if t.spec.snapshot_dir is None:
        raise TrainerError("publish_snapshot: no snapshot_dir configured")
    error = _wait_behind(t)  # one writer: the snapshot being written behind goes first
    state = t.engine.full_state_dict()
    if not error and t.publisher is not None and state is not None:
        try:
            t.last_snapshot = _publish(t, state)
        except Exception as exc:  # report on every rank, never leave others waiting
            error = f"{type(exc).__name__}: {exc}"
    failed = t.engine.all_reduce_sum(torch.tensor([1.0 if error else 0.0]))
    if float(failed.sum()) > 0:
        raise TrainerError(
            f"publishing snapshot v{t.policy_version} failed ({error or 'on rank 0'}); "
            "'latest' still names the previous snapshot"
        )
    return t.last_snapshot if t.rank == 0 else None


def publish_for_step(t: TrainerRank) -> tuple[str | None, dict[str, Any] | None, dict[str, float]]:
    """The step's publish of ``v{policy_version}`` (collective): ``(snapshot path, channel
    descriptor, metrics)`` on rank 0. With the handoff on, the weights go into the
    channel and the snapshot is written behind (``timing/weight_handoff``: the copy);
    else the snapshot is published now (no descriptor)."""
    if t.handoff is None:  # (the other ranks: the same collectives as rank 0's either way)
        snap = publish_snapshot(t)
        return (None if snap is None else str(snap.path)), None, {}
    state = t.engine.full_state_dict()
    error = ""
    out: tuple[str | None, dict[str, Any] | None, dict[str, float]] = (None, None, {})
    if state is not None:
        try:
            out = _hand_over(t, state)
        except Exception as exc:  # report on every rank, never leave others waiting
            error = f"{type(exc).__name__}: {exc}"
    failed = t.engine.all_reduce_sum(torch.tensor([1.0 if error else 0.0]))
    if float(failed.sum()) > 0:
        raise TrainerError(
            f"handing v{t.policy_version} over failed ({error or 'on rank 0'}); "
            "'latest' still names the previous snapshot"
        )
    return out


def _hand_over(
    t: TrainerRank, state: dict[str, Tensor]
) -> tuple[str | None, dict[str, Any] | None, dict[str, float]]:
    """Rank 0: ``state`` into the channel, the snapshot behind; where the channel itself
    fails (no room for the buffer, ...), one warning and files from now on: the
    snapshot is published now."""
    assert t.handoff is not None and t.publisher is not None
    config = getattr(t.engine.module, "config", t.model_config)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    tensors = prepare_state_dict(state, tie_word_embeddings=tied)
    written_s = t.handoff.last_write_s  # the previous snapshot, written behind
    try:
        path, descriptor, copy_s = t.handoff.publish(t.publisher, tensors, config, t.policy_version)
    except (TransportError, LayoutError, OSError) as exc:
        logger.warning(
            "weight handoff in memory failed on the trainer (%s); snapshots (files) from now on",
            exc,
        )
        handoff.disable(t)
        t.last_snapshot = _publish(t, state)
        return str(t.last_snapshot.path), None, {}
    metrics = {"timing/weight_handoff": copy_s}
    if written_s is not None:
        metrics["timing/snapshot_background"] = written_s
    return str(path), descriptor, metrics


def _publish(t: TrainerRank, state: dict[str, Tensor]) -> PublishedSnapshot:
    """Rank 0: the full weights, or with LoRA the adapter alone."""
    assert t.publisher is not None
    module = t.engine.module
    if t.lora:
        adapter = adapter_state_dict(module, state)
        config = adapter_config(module, t.spec.model_path)
        return t.publisher.publish_adapter(adapter, config, t.policy_version)
    model_config = getattr(module, "config", t.model_config)
    return t.publisher.publish(state, model_config, t.policy_version)


def _wait_behind(t: TrainerRank) -> str:
    """Wait for the snapshot the handoff writes behind; what went wrong ('' if nothing)."""
    if t.handoff is None:
        return ""
    try:
        t.handoff.wait()
    except TrainerError as exc:
        return str(exc)
    return ""


def snapshot_due(t: TrainerRank, updated: bool) -> bool:
    """Whether this step publishes: an update applied on a ``sync_every`` version."""
    return updated and t.spec.snapshot_dir is not None and t.policy_version % t.spec.sync_every == 0


def checkpoint_due(t: TrainerRank) -> bool:
    """Whether the trainer checkpoints on its own now (``spec.auto_checkpoint``)."""
    if t.checkpoints is None or not t.spec.auto_checkpoint:
        return False
    every = t.cfg.save_every
    return (every > 0 and t.global_step % every == 0) or (t.global_step == t.cfg.total_train_steps)


def save_checkpoint(t: TrainerRank, extra_state: dict[str, Any] | None) -> Path | None:
    """Checkpoint ``step_{global_step}`` (collective); ``extra_state`` is saved with it."""
    if t.checkpoints is None:
        raise TrainerError("save_checkpoint: no checkpoint_dir configured")
    if extra_state is not None:
        t.extra_state = dict(extra_state)
    # a checkpoint's version has its snapshot on disk (every rank learns if it failed)
    error = _wait_behind(t)
    if float(t.engine.all_reduce_sum(torch.tensor([1.0 if error else 0.0])).sum()) > 0:
        raise TrainerError(error or "the snapshot written behind failed on rank 0")
    return t.checkpoints.save(t.engine, t.global_step, t.state_dict(), t.extra_engines)
