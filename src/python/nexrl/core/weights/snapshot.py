"""Weight snapshots: Hugging Face directories that inference reloads, published atomically.

Layout under the snapshot root (``weight.snapshot_dir``)::

    v3/                  a complete snapshot: config.json, model.safetensors (or
    v4/                  model-0000k-of-0000n.safetensors + index), tokenizer files,
                         generation_config.json, ``checksums.json`` (size and
                         sha256 of every other file) and ``version`` (the integer N);
                         with LoRA (``trainer.lora``): adapter_model.safetensors +
                         adapter_config.json instead of config.json and the weights
    latest -> v4         relative symlink, replaced atomically
    .tmp-v5-1a2b3c4d/    a publish in progress (or one a crash interrupted)

``AutoModelForCausalLM.from_pretrained("<root>/v4")`` (or ``<root>/latest``)
loads a snapshot, and so do vLLM/SGLang and the embedded server's
``update_weights_from_disk``.

Publishing ``vN``: write every file into ``.tmp-vN-<nonce>`` on the same file
system, the ``version`` file last; ``fsync`` the files and the directory;
``rename`` it to ``vN``; then repoint ``latest`` (new symlink + ``rename``).
Each ``rename`` is atomic, so a reader sees either the previous snapshot or the
complete new one: a writer killed at any point, or a write failing (disk full,
file too large, permissions), leaves ``latest`` on the previous good snapshot
and at worst a stray ``.tmp-*`` folder (or ``.latest.tmp-*`` link), which the next
publisher removes. Old
snapshots beyond ``keep`` are pruned after ``latest`` moved (the one ``latest``
names never is): renamed to ``.trash-*`` at once, so no reader sees a
half-deleted snapshot, then deleted in a background thread, off the publish's
critical path.

Corruption: :func:`verify_snapshot` checks a snapshot's files against its
``checksums.json``. On resume the trainer verifies the snapshot of the version it
resumed at and publishes it again from the checkpoint's weights when it does not
match (one warning line naming it), so the inference server never starts from a
truncated or altered file. Snapshots written before checksums were recorded (no
``checksums.json``) are trusted as they are.

ZeRO: callers pass a *consolidated* state dict (``TrainingEngine.full_state_dict``
gathers ZeRO-3 partitions on rank 0; stages 0-2 keep full parameters).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nexrl.core.util.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from nexrl.core.util.checksums import tree_checksums
from nexrl.core.util.files import (
    atomic_symlink,
    fsync_dir,
    fsync_tree,
    is_temp_name,
    remove_tree,
    replace_dir,
)
from nexrl.core.weights.safetensors_write import (
    DEFAULT_MAX_SHARD_BYTES,
    prepare_state_dict,
    write_safetensors,
    write_safetensors_file,
)
from nexrl.core.weights.snapshot_read import (
    CHECKSUMS_FILE,
    LATEST_NAME,
    VERSION_FILE,
    SnapshotError,
    latest_snapshot,
    list_snapshots,
    read_version,
    verify_snapshot,
)

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "CHECKSUMS_FILE",
    "LATEST_NAME",
    "VERSION_FILE",
    "PublishedSnapshot",
    "SnapshotError",
    "SnapshotPublisher",
    "latest_snapshot",
    "list_snapshots",
    "prepare_state_dict",
    "read_version",
    "verify_snapshot",
    "write_safetensors",
]

logger = logging.getLogger(__name__)

_TMP_PREFIX = ".tmp-v"
# Files copied from the tokenizer / model folder next to the weights.
_TOKENIZER_PREFIXES = (
    "tokenizer",
    "special_tokens_map",
    "vocab",
    "merges",
    "added_tokens",
    "chat_template",
    "generation_config",
    "preprocessor_config",
)


@dataclass(frozen=True)
class PublishedSnapshot:
    """What :meth:`SnapshotPublisher.publish` wrote."""

    version: int
    path: Path
    num_bytes: int
    seconds: float


def _copy_tokenizer_files(src: Path, dst: Path) -> None:
    if not src.is_dir():
        raise SnapshotError(f"tokenizer folder {str(src)!r} does not exist")
    for entry in sorted(src.iterdir()):
        if entry.is_file() and entry.name.startswith(_TOKENIZER_PREFIXES):
            shutil.copyfile(entry, dst / entry.name)


class SnapshotPublisher:
    """Publishes versioned snapshots under ``root`` (one writer: rank 0 of the trainer).

    Args:
        root: the snapshot folder (created if missing).
        keep: complete snapshots kept; older ones are deleted after a publish.
        tokenizer_dir: folder whose tokenizer / generation-config files are
            copied into every snapshot (usually the initial model folder).
        max_shard_bytes: safetensors shard size.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        keep: int = 3,
        tokenizer_dir: str | Path | None = None,
        max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r}")
        self.root = Path(root)
        self.keep = keep
        self.tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir is not None else None
        self.max_shard_bytes = max_shard_bytes
        self._deleter: threading.Thread | None = None
        self.root.mkdir(parents=True, exist_ok=True)
        self.cleanup_partial()

    def cleanup_partial(self) -> None:
        """Remove ``.tmp-*`` / ``.trash-*`` folders and ``.latest.tmp-*`` links left by an
        interrupted publish."""
        for entry in self.root.iterdir():
            if entry.name.startswith((_TMP_PREFIX, ".trash-")) or is_temp_name(entry.name):
                remove_tree(entry)

    def publish(
        self, state_dict: Mapping[str, torch.Tensor], config: Any, version: int
    ) -> PublishedSnapshot:
        """Write snapshot ``v{version}`` atomically and point ``latest`` at it.

        ``config`` is the model's ``PretrainedConfig``; its ``dtype`` is set to
        the dtype of the weights written. Re-publishing an existing version
        replaces it. Any failure leaves ``latest`` and the existing snapshots
        untouched and raises.
        """

        def write(tmp: Path) -> dict[str, str]:
            tied = bool(getattr(config, "tie_word_embeddings", False))
            tensors = prepare_state_dict(state_dict, tie_word_embeddings=tied)
            digests: dict[str, str] = {}
            write_safetensors(
                tensors, tmp, max_shard_bytes=self.max_shard_bytes, digests=digests, fsync=True
            )
            cfg = copy.deepcopy(config)
            dtypes = {t.dtype for t in tensors.values() if t.is_floating_point()}
            if len(dtypes) == 1:
                cfg.dtype = next(iter(dtypes))
            cfg.save_pretrained(str(tmp))
            return digests

        return self._publish(version, write)

    def publish_adapter(
        self,
        adapter_state: Mapping[str, torch.Tensor],
        adapter_config: dict[str, Any],
        version: int,
    ) -> PublishedSnapshot:
        """Write a LoRA snapshot ``v{version}`` (``adapter_model.safetensors`` +
        ``adapter_config.json``, PEFT's layout) the same atomic way as :meth:`publish`."""

        def write(tmp: Path) -> dict[str, str]:
            tensors = prepare_state_dict(adapter_state)
            digests: dict[str, str] = {}
            write_safetensors_file(tmp / ADAPTER_WEIGHTS, tensors, digests, fsync=True)
            (tmp / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2, default=str))
            return digests

        return self._publish(version, write)

    def _publish(self, version: int, write: Any) -> PublishedSnapshot:
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version!r}")
        start = time.perf_counter()
        final = self.root / f"v{version}"
        tmp = self.root / f"{_TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            hashed: dict[str, str] = write(tmp)  # weight files hashed as they were written
            if self.tokenizer_dir is not None:
                _copy_tokenizer_files(self.tokenizer_dir, tmp)
            sums = tree_checksums(tmp, exclude=hashed)
            for name, digest in hashed.items():
                sums[name] = {"bytes": (tmp / name).stat().st_size, "sha256": digest}
            (tmp / CHECKSUMS_FILE).write_text(json.dumps(sums, indent=1, sort_keys=True))
            # the version file is written last: a folder without it is incomplete
            (tmp / VERSION_FILE).write_text(f"{version}\n")
            num_bytes = fsync_tree(tmp)
            self._unpoint_latest_from(final)
            replace_dir(tmp, final)
            atomic_symlink(final.name, self.root / LATEST_NAME)
        except BaseException:
            remove_tree(tmp)
            raise
        try:
            self.prune(background=True)
        except OSError as exc:  # the snapshot is published; housekeeping can wait
            logger.warning("pruning old snapshots under %s failed: %s", self.root, exc)
        return PublishedSnapshot(version, final, num_bytes, time.perf_counter() - start)

    def _unpoint_latest_from(self, final: Path) -> None:
        """Before ``final`` is replaced: move ``latest`` off it (to the newest other snapshot)."""
        link = self.root / LATEST_NAME
        if not (link.is_symlink() and final.exists()):
            return
        if os.path.realpath(link) != os.path.realpath(final):
            return
        others = [p for _, p in list_snapshots(self.root) if p.name != final.name]
        if others:
            atomic_symlink(others[-1].name, link)

    def prune(self, *, background: bool = False) -> list[int]:
        """Drop complete snapshots beyond the newest ``keep`` (never ``latest``'s).

        Each is first renamed to ``.trash-*`` (so no reader ever sees a half-deleted
        snapshot), then deleted, in a background thread when ``background``.
        Returns the versions dropped.
        """
        current = latest_snapshot(self.root)
        snaps = list_snapshots(self.root)
        removed, trash = [], []
        for v, p in snaps[: max(0, len(snaps) - self.keep)]:
            if current is not None and v == current[0]:
                continue
            t = p.with_name(f".trash-{p.name}-{uuid.uuid4().hex[:8]}")
            os.rename(p, t)
            trash.append(t)
            removed.append(v)
        if trash:
            self.wait()
            if background:
                self._deleter = threading.Thread(
                    target=_remove_all, args=(trash,), name="snapshot-prune", daemon=True
                )
                self._deleter.start()
            else:
                _remove_all(trash)
        return removed

    def wait(self) -> None:
        """Wait for a background deletion of pruned snapshots to finish."""
        if self._deleter is not None:
            self._deleter.join()
            self._deleter = None

    def discard_newer_than(self, version: int) -> list[int]:
        """After a resume to ``version``: drop snapshots a lost run published past it.

        ``latest`` is first pointed at the newest remaining snapshot (or removed).
        """
        snaps = list_snapshots(self.root)
        newer = [(v, p) for v, p in snaps if v > version]
        if not newer:
            return []
        keep = [(v, p) for v, p in snaps if v <= version]
        link = self.root / LATEST_NAME
        if keep:
            atomic_symlink(keep[-1][1].name, link)
        elif link.is_symlink():
            link.unlink()
            fsync_dir(self.root)
        trash = []
        for _, p in newer:
            t = p.with_name(f".trash-{p.name}-{uuid.uuid4().hex[:8]}")
            os.rename(p, t)
            trash.append(t)
        _remove_all(trash)
        return [v for v, _ in newer]


def _remove_all(paths: list[Path]) -> None:
    for p in paths:
        remove_tree(p)
