"""On-disk layout of a trajectory pool (see docs/pool.md for the full picture).

::

    pool.zarr/                       zarr v3 group (root metadata written once, exclusively)
      zarr.json                      attributes: {"nexrl_pool": {"format": ..., "version": 1}}
      segments/                      zarr group
        <writer_id>/                 one zarr group per writer process, written only by it
          rows      int64 [CAP, 11]  per-trajectory ints (ROW_COLUMNS)
          values    float32 [CAP, 64] reward + metrics (names in the commit markers)
          prompt_ids int32 [CAP]     flat ragged arrays; offsets/lengths are in ``rows``
          response_ids int32, loss_mask int8, logprobs float32 [CAP]
          meta      uint8 [CAP]      Trajectory.to_record()["meta"] JSON, UTF-8
      _commits/<writer_id>/<seq>.json   commit markers: a record exists iff its marker does
      _consumers/<name>/<gen>.json      consumer cursor generations (+ LATEST hint)
      _control/weight_sync.json         weight-sync flag and current policy version

Arrays have a fixed, huge shape (``CAPACITY``) so they are never resized: their
metadata is written once when the segment is created. Every append starts at a
chunk boundary, so no chunk is ever written twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from nexrl.core.errors import NexrlError
from nexrl.core.pool.kv import KVStore, is_local, local_path

__all__ = [
    "CAPACITY",
    "COMMITS",
    "CONSUMERS",
    "CONTROL",
    "FORMAT",
    "MAX_METRICS",
    "ROW_COLUMNS",
    "SEGMENTS",
    "Chunking",
    "PoolStoreError",
    "ensure_pool",
    "open_zarr_store",
]

FORMAT = "nexrl-trajectory-pool"
FORMAT_VERSION = 2
SEGMENTS = "segments"
COMMITS = "_commits"
CONSUMERS = "_consumers"
CONTROL = "_control"
CAPACITY = 2**40  # elements per array: never reached in practice, never resized
MAX_METRICS = 63  # metric columns per segment; more stay in the meta JSON only

ROW_COLUMNS: tuple[str, ...] = (
    "group_id",
    "run_id",
    "policy_version",
    "policy_version_last",
    "prompt_off",
    "prompt_len",
    "response_off",
    "response_len",
    "meta_off",
    "meta_len",
    "weight_sync",
    "created_ns",
)
COL = {name: i for i, name in enumerate(ROW_COLUMNS)}


class PoolStoreError(RuntimeError, NexrlError):
    """The store is not a trajectory pool, or is from an incompatible version."""


@dataclass(frozen=True)
class Chunking:
    """Chunk sizes (elements) and compression of a segment's arrays.

    Chosen by measurement (docs/pool.md, "Chunking"; ``NEXRL_BENCH_CHUNKING=1``):
    every append starts a fresh chunk, so for the typical append (one rollout
    group, a few thousand tokens) most of its last chunk is padding that a batch
    read decodes again; 32k-token and 256-row chunks keep that small while bulk
    appends still write at ~60+ MB/s. Blosc-LZ4 with byte shuffle decodes ~6x
    faster than Blosc-Zstd for ~10% more disk, and it keeps the padding
    (fill values) almost free on disk, which no compression at all does not.
    """

    row_chunk: int = 256
    token_chunk: int = 32768
    meta_chunk: int = 65536
    metric_chunk: int = 16
    codec: str = "lz4"
    clevel: int = 5
    shuffle: bool = True

    def compressors(self, typesize: int) -> list[Any] | None:
        from zarr.codecs import BloscCodec

        if self.codec == "none":
            return None
        shuffle: Any = "shuffle" if self.shuffle and typesize > 1 else "noshuffle"
        cname: Any = self.codec
        return [BloscCodec(cname=cname, clevel=self.clevel, shuffle=shuffle, typesize=typesize)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _group_json(attributes: dict[str, Any]) -> bytes:
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()


def ensure_pool(kv: KVStore) -> None:
    """Create the root and ``segments`` group metadata if absent (create-only, never rewritten)."""
    attrs = {"nexrl_pool": {"format": FORMAT, "version": FORMAT_VERSION}}
    kv.put("zarr.json", _group_json(attrs), exclusive=True)
    raw = kv.get("zarr.json")
    try:
        info = json.loads(raw or b"{}").get("attributes", {}).get("nexrl_pool", {})
    except json.JSONDecodeError:
        info = {}
    if info.get("format") != FORMAT:
        raise PoolStoreError(
            "the store exists but is not a NexRL trajectory pool (no 'nexrl_pool' attribute "
            "in zarr.json); point trajectory_pool.store at a new or pool folder"
        )
    found = int(info.get("version", 0))
    if found > FORMAT_VERSION:
        raise PoolStoreError(
            f"pool format version {found} is newer than this nexrl "
            f"(reads {FORMAT_VERSION}); upgrade nexrl"
        )
    if found < FORMAT_VERSION:
        raise PoolStoreError(
            f"pool format version {found} is older than this nexrl's ({FORMAT_VERSION}: "
            "each trajectory's newest policy version was added); point "
            "trajectory_pool.store (or output_dir) at a new folder"
        )
    kv.put(f"{SEGMENTS}/zarr.json", _group_json({}), exclusive=True)


def open_zarr_store(
    url: str, storage_options: dict[str, Any] | None = None, *, read_only: bool
) -> Any:
    """A zarr v3 store rooted at ``url`` (a local path or any fsspec URL)."""
    from zarr.storage import FsspecStore, LocalStore

    if is_local(url):
        path = local_path(url)
        if not read_only:
            path.mkdir(parents=True, exist_ok=True)
        return LocalStore(path, read_only=read_only)
    return FsspecStore.from_url(url, storage_options=storage_options, read_only=read_only)


def join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *parts])
