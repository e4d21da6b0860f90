"""Weight snapshots: Hugging Face directories that inference reloads, published atomically.

Layout under the snapshot root (``weight.snapshot_dir``)::

    v3/                  a complete snapshot: config.json, model.safetensors (or
    v4/                  model-0000k-of-0000n.safetensors + index), tokenizer files,
                         generation_config.json, and ``version`` (the integer N)
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
and at worst a stray ``.tmp-*`` folder, which the next publisher removes. Old
snapshots beyond ``keep`` are deleted after ``latest`` moved (the one ``latest``
names is never deleted).

ZeRO: callers pass a *consolidated* state dict (``TrainingEngine.full_state_dict``
gathers ZeRO-3 partitions on rank 0; stages 0-2 keep full parameters).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nexrl.weights.fsutil import atomic_symlink, fsync_dir, fsync_tree, remove_tree

__all__ = [
    "LATEST_NAME",
    "VERSION_FILE",
    "PublishedSnapshot",
    "SnapshotError",
    "SnapshotPublisher",
    "latest_snapshot",
    "list_snapshots",
    "prepare_state_dict",
    "read_version",
    "write_safetensors",
]

LATEST_NAME = "latest"
VERSION_FILE = "version"
_SNAPSHOT_RE = re.compile(r"^v(\d+)$")
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
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3


class SnapshotError(RuntimeError):
    """A snapshot could not be published or read; the message names the path."""


@dataclass(frozen=True)
class PublishedSnapshot:
    """What :meth:`SnapshotPublisher.publish` wrote."""

    version: int
    path: Path
    num_bytes: int
    seconds: float


def read_version(path: str | Path) -> int | None:
    """The version in ``path/version``; ``None`` when missing or unreadable (incomplete)."""
    try:
        return int((Path(path) / VERSION_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def list_snapshots(root: str | Path) -> list[tuple[int, Path]]:
    """Complete snapshots ``(version, path)`` under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = _SNAPSHOT_RE.match(entry.name)
        if (
            m
            and entry.is_dir()
            and not entry.is_symlink()
            and read_version(entry) == int(m.group(1))
        ):
            found.append((int(m.group(1)), entry))
    return sorted(found)


def latest_snapshot(root: str | Path) -> tuple[int, Path] | None:
    """``(version, path)`` that ``root/latest`` names, else the newest complete one."""
    root = Path(root)
    link = root / LATEST_NAME
    if link.is_symlink():
        target = root / os.readlink(link)
        version = read_version(target)
        if version is not None:
            return version, target
    snaps = list_snapshots(root)
    return snaps[-1] if snaps else None


def prepare_state_dict(
    state_dict: Mapping[str, torch.Tensor], *, tie_word_embeddings: bool = False
) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors that safetensors can store.

    Tensors sharing storage (tied embeddings) cannot be saved twice: with
    ``tie_word_embeddings`` the later names are dropped (``from_pretrained``
    re-ties them), otherwise they are stored as separate copies.
    """
    out: dict[str, torch.Tensor] = {}
    same: dict[tuple[Any, ...], str] = {}  # exact alias -> first name
    storages: set[tuple[str, int]] = set()
    for name, tensor in state_dict.items():
        t = tensor.detach()
        ptr = (str(t.device), t.untyped_storage().data_ptr())
        alias = (*ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if t.numel() > 0 and alias in same:
            if tie_word_embeddings:
                continue
            out[name] = t.to("cpu", copy=True).contiguous()
        elif t.numel() > 0 and ptr in storages:  # a different view of a stored storage
            out[name] = t.to("cpu", copy=True).contiguous()
        else:
            same[alias] = name
            storages.add(ptr)
            t = t.to("cpu").contiguous()
            if t.untyped_storage().nbytes() != t.numel() * t.element_size():
                t = t.clone()  # a view into a flat buffer (ZeRO 1/2): store only its bytes
            out[name] = t
    return out


def write_safetensors(
    state_dict: Mapping[str, torch.Tensor],
    out_dir: str | Path,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> int:
    """Write ``model.safetensors`` (or shards + ``model.safetensors.index.json``); returns bytes.

    Tensors must already be CPU, contiguous and storage-disjoint
    (:func:`prepare_state_dict`). Shards follow the Hugging Face naming.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state_dict.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    total = sum(t.numel() * t.element_size() for t in state_dict.values())
    meta = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata=meta)
        return total
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata=meta)
        weight_map.update(dict.fromkeys(shard, fname))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total


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
        self.root.mkdir(parents=True, exist_ok=True)
        self.cleanup_partial()

    def cleanup_partial(self) -> None:
        """Remove ``.tmp-*`` / ``.trash-*`` folders left by an interrupted publish."""
        for entry in self.root.iterdir():
            if entry.name.startswith((_TMP_PREFIX, ".trash-")):
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
        if version < 0:
            raise ValueError(f"version must be >= 0, got {version!r}")
        start = time.perf_counter()
        final = self.root / f"v{version}"
        tmp = self.root / f"{_TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            tied = bool(getattr(config, "tie_word_embeddings", False))
            tensors = prepare_state_dict(state_dict, tie_word_embeddings=tied)
            write_safetensors(tensors, tmp, max_shard_bytes=self.max_shard_bytes)
            cfg = copy.deepcopy(config)
            dtypes = {t.dtype for t in tensors.values() if t.is_floating_point()}
            if len(dtypes) == 1:
                cfg.dtype = next(iter(dtypes))
            cfg.save_pretrained(str(tmp))
            if self.tokenizer_dir is not None:
                _copy_tokenizer_files(self.tokenizer_dir, tmp)
            # the version file is written last: a folder without it is incomplete
            (tmp / VERSION_FILE).write_text(f"{version}\n")
            num_bytes = fsync_tree(tmp)
            self._unpoint_latest_from(final)
            _replace(tmp, final)
            atomic_symlink(final.name, self.root / LATEST_NAME)
        except BaseException:
            remove_tree(tmp)
            raise
        self.prune()
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

    def prune(self) -> list[int]:
        """Delete complete snapshots beyond the newest ``keep`` (never ``latest``'s); the
        versions deleted."""
        current = latest_snapshot(self.root)
        snaps = list_snapshots(self.root)
        doomed = [(v, p) for v, p in snaps[: max(0, len(snaps) - self.keep)]]
        removed = []
        for v, p in doomed:
            if current is not None and v == current[0]:
                continue
            remove_tree(p)
            removed.append(v)
        return removed

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
        for _, p in newer:
            remove_tree(p)
        return [v for v, _ in newer]


def _replace(tmp: Path, final: Path) -> None:
    """``rename(tmp, final)``; an existing ``final`` is renamed aside and deleted."""
    trash = None
    if final.exists():
        trash = final.with_name(f".trash-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, trash)
    os.rename(tmp, final)
    fsync_dir(final.parent)
    if trash is not None:
        remove_tree(trash)
