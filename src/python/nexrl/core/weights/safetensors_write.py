"""A model's state dict -> safetensors files: the tensors to write
(``prepare_state_dict``), one file or Hugging Face shards written in parallel,
each hashed while written (``write_safetensors``). Used by the snapshot publisher
(``nexrl.core.weights.snapshot``)."""

from __future__ import annotations

import itertools
import json
import os
import struct
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from nexrl.core.util.checksums import write_hashed
from nexrl.core.weights.snapshot_read import SnapshotError

__all__ = [
    "DEFAULT_MAX_SHARD_BYTES",
    "MAX_SHARD_WRITERS",
    "prepare_state_dict",
    "write_safetensors",
    "write_safetensors_file",
]

# Shards of at most 256 MiB: a snapshot's shards are written (and hashed, fsynced) in
# parallel, so a few hundred million parameters are written by several threads
# (docs/benchmarks.md, "Shards written in parallel, sent to disk while written": a 716 MB
# publish from a GPU 0.76 s -> 0.34 s on a 16-core machine); small models stay one file.
DEFAULT_MAX_SHARD_BYTES = 256 * 1024**2
# Threads writing a snapshot's shards at once (each with its own hashing thread).
MAX_SHARD_WRITERS = 8


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


def write_safetensors_file(
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
        return write_safetensors_file(out / "model.safetensors", shards[0], digests, fsync=fsync)
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    workers = min(len(shards), MAX_SHARD_WRITERS, os.cpu_count() or 1)

    def write(i: int) -> int:
        return write_safetensors_file(out / names[i], shards[i], digests, fsync=fsync)

    with ThreadPoolExecutor(workers, thread_name_prefix="nexrl-shard-writer") as pool:
        futures = [pool.submit(write, i) for i in range(len(shards))]
    total = sum(f.result() for f in futures)  # (all done: the pool was shut down)
    weight_map = {name: fname for fname, shard in zip(names, shards, strict=True) for name in shard}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total
