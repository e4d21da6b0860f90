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
import itertools
import json
import logging
import os
import re
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nexrl.errors import NexrlError
from nexrl.util.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from nexrl.util.checksums import check_tree, tree_checksums, write_hashed
from nexrl.util.files import (
    atomic_symlink,
    fsync_dir,
    fsync_tree,
    is_temp_name,
    remove_tree,
    replace_dir,
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

LATEST_NAME = "latest"
VERSION_FILE = "version"
CHECKSUMS_FILE = "checksums.json"
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
# Shards of at most 256 MiB: a snapshot's shards are written (and hashed, fsynced) in
# parallel, so a few hundred million parameters are written by several threads
# (docs/benchmarks.md, "Shards written in parallel, sent to disk while written": a 716 MB
# publish from a GPU 0.76 s -> 0.34 s on a 16-core machine); small models stay one file.
DEFAULT_MAX_SHARD_BYTES = 256 * 1024**2
# Threads writing a snapshot's shards at once (each with its own hashing thread).
MAX_SHARD_WRITERS = 8


class SnapshotError(RuntimeError, NexrlError):
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


def verify_snapshot(path: str | Path) -> str | None:
    """``None`` when ``path`` is complete and its files match ``checksums.json`` (or it
    has none: published before checksums were recorded); else one line saying why not."""
    path = Path(path)
    if read_version(path) is None:
        return f"{path / VERSION_FILE} is missing or unreadable (an incomplete snapshot)"
    try:
        manifest = json.loads((path / CHECKSUMS_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path / CHECKSUMS_FILE} is unreadable ({exc})"
    return check_tree(path, manifest)


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
    """The tensors to write, in order, detached where they are.

    A name that aliases an earlier tensor exactly (tied embeddings) is dropped
    with ``tie_word_embeddings`` (``from_pretrained`` re-ties it) and written
    as its own copy of the bytes otherwise. Nothing is copied here: CPU views into
    a flat buffer (ZeRO-1/2 parameters) are written straight from it, and a GPU
    tensor is copied to the host one at a time by the thread writing its shard
    (overlapping the other shards' writes; no host copy of the whole model).
    """
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[Any, ...]] = set()
    for name, tensor in state_dict.items():
        t = tensor.detach()
        alias = (
            str(t.device),
            t.untyped_storage().data_ptr(),
            t.storage_offset(),
            tuple(t.shape),
            tuple(t.stride()),
        )
        if tie_word_embeddings and t.numel() > 0 and alias in seen:
            continue
        seen.add(alias)
        out[name] = t
    return out


_ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def _byte_view(t: torch.Tensor) -> memoryview:
    """The tensor's bytes (little-endian, as safetensors stores them): a contiguous CPU
    tensor's without a copy, another's from its contiguous host copy."""
    t = t.to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    array: Any = t.numpy()
    return memoryview(array).cast("B")


def _write_safetensors_file(
    path: Path,
    tensors: Mapping[str, torch.Tensor],
    digests: dict[str, str] | None = None,
    *,
    fsync: bool = False,
) -> int:
    """One safetensors file: 8-byte header size, JSON header (8-byte aligned), raw data.

    Written tensor by tensor straight from memory, hashed while written
    (``digests[path.name]``: its sha256, for ``checksums.json`` without reading the
    file back), ``fsync``ed before it is closed with ``fsync``; returns the data bytes.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _ST_DTYPES:
            raise SnapshotError(f"tensor {name!r}: dtype {t.dtype} cannot be stored in safetensors")
        n = t.numel() * t.element_size()
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    # lazily: a tensor that must be made contiguous is copied only when its turn comes
    buffers = itertools.chain(
        (struct.pack("<Q", len(raw)), raw),
        (_byte_view(t) for t in tensors.values() if t.numel() > 0),
    )
    with open(path, "wb") as fh:
        digest = write_hashed(fh, buffers, writeback=fsync)  # to disk while written
        if fsync:  # here, while other shards are still being written
            os.fsync(fh.fileno())
    if digests is not None:
        digests[path.name] = digest
    return offset


def write_safetensors(
    state_dict: Mapping[str, torch.Tensor],
    out_dir: str | Path,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    digests: dict[str, str] | None = None,
    fsync: bool = False,
) -> int:
    """Write ``model.safetensors`` (or shards + ``model.safetensors.index.json``); returns bytes.

    Tensors come from :func:`prepare_state_dict` (on the CPU or a GPU). Shards follow the
    Hugging Face naming and are written by up to ``MAX_SHARD_WRITERS`` threads at once
    (file writes and sha256 release the GIL: a 716 MB snapshot in three shards is
    written and hashed by three threads instead of one). Each tensor's bytes are
    written without a copy, each file's sha256 goes into ``digests`` (file name ->
    hex digest) when given, and each file is fsynced as soon as it is written with
    ``fsync``. The first failure (disk full, ...) is raised after every writer stopped.
    """
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
    if len(shards) == 1:
        return _write_safetensors_file(out / "model.safetensors", shards[0], digests, fsync=fsync)
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    workers = min(len(shards), MAX_SHARD_WRITERS, os.cpu_count() or 1)

    def write(i: int) -> int:
        return _write_safetensors_file(out / names[i], shards[i], digests, fsync=fsync)

    with ThreadPoolExecutor(workers, thread_name_prefix="nexrl-shard-writer") as pool:
        futures = [pool.submit(write, i) for i in range(len(shards))]
    total = sum(f.result() for f in futures)  # (all done: the pool was shut down)
    weight_map = {name: fname for fname, shard in zip(names, shards, strict=True) for name in shard}
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
            _write_safetensors_file(tmp / ADAPTER_WEIGHTS, tensors, digests, fsync=True)
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
