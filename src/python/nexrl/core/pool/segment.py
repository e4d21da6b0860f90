"""One writer's zarr arrays (``segments/<writer_id>``): create, write a block, read back.

A segment is written by exactly one process. Its arrays are created once with a
fixed capacity and every block starts at a chunk boundary (``Positions.aligned``),
so writing never touches a chunk or a metadata document that already exists.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexrl.core.pool.chunkio import ChunkedArray
from nexrl.core.pool.columns import (
    PROMPT_DTYPE,
    RESPONSE_DTYPES,
    TrajectoryColumns,
    offsets_of,
)
from nexrl.core.pool.kv import open_kv
from nexrl.core.pool.layout import (
    CAPACITY,
    COL,
    MAX_METRICS,
    ROW_COLUMNS,
    SEGMENTS,
    Chunking,
    join,
    open_zarr_store,
)

__all__ = ["Positions", "Segment"]

RAGGED_ARRAYS = ("prompt_ids", "response_ids", "loss_mask", "logprobs", "meta")


@dataclass(frozen=True)
class Positions:
    """Where the next block goes: element offsets into each family of arrays."""

    row: int = 0
    prompt: int = 0
    response: int = 0
    meta: int = 0

    def aligned(self, c: Chunking) -> Positions:
        """Round every offset up to its chunk boundary."""

        def up(x: int, k: int) -> int:
            return -(-x // k) * k

        return Positions(
            up(self.row, c.row_chunk),
            up(self.prompt, c.token_chunk),
            up(self.response, c.token_chunk),
            up(self.meta, c.meta_chunk),
        )

    def after(self, cols: TrajectoryColumns) -> Positions:
        return Positions(
            self.row + len(cols),
            self.prompt + len(cols.prompt_ids),
            self.response + len(cols.response_ids),
            self.meta + len(cols.meta_bytes),
        )

    def fits(self) -> bool:
        return max(self.row, self.prompt, self.response, self.meta) < CAPACITY


def _specs(c: Chunking) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], np.dtype, Any]]:
    """name -> (shape, chunks, dtype, fill value)."""
    tok = (c.token_chunk,)
    return {
        "rows": (
            (CAPACITY, len(ROW_COLUMNS)),
            (c.row_chunk, len(ROW_COLUMNS)),
            np.dtype("int64"),
            0,
        ),
        "values": (
            (CAPACITY, 1 + MAX_METRICS),
            (c.row_chunk, c.metric_chunk),
            np.dtype("float32"),
            np.nan,
        ),
        "prompt_ids": ((CAPACITY,), tok, PROMPT_DTYPE, 0),
        "response_ids": ((CAPACITY,), tok, RESPONSE_DTYPES["response_ids"], 0),
        "loss_mask": ((CAPACITY,), tok, RESPONSE_DTYPES["loss_mask"], 0),
        "logprobs": ((CAPACITY,), tok, RESPONSE_DTYPES["logprobs"], 0),
        "meta": ((CAPACITY,), (c.meta_chunk,), np.dtype("uint8"), 0),
    }


class Segment:
    """The arrays of one writer; see the module docstring."""

    def __init__(
        self,
        root: Any,
        chunking: Chunking,
        writer_id: str,
        url: str,
        storage_options: dict[str, Any] | None,
    ) -> None:
        self.root = root  # the zarr group (metadata, and zarr-API access for analysis)
        self.chunking = chunking
        self.writer_id = writer_id
        self.kv = open_kv(join(url, SEGMENTS, writer_id), storage_options)
        self._io: dict[str, ChunkedArray] = {}

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    def create(
        cls, url: str, writer_id: str, chunking: Chunking, storage_options: dict[str, Any] | None
    ) -> Segment:
        """Create the segment group and its arrays (fails if it already exists)."""
        import zarr

        store = open_zarr_store(join(url, SEGMENTS, writer_id), storage_options, read_only=False)
        info = {
            "writer_id": writer_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "created": time.time(),
            "chunking": chunking.to_dict(),
            "row_columns": list(ROW_COLUMNS),
        }
        root = zarr.create_group(store, attributes={"nexrl_segment": info}, overwrite=False)
        seg = cls(root, chunking, writer_id, url, storage_options)
        for name, (shape, chunks, dtype, fill) in _specs(chunking).items():
            arr = root.create_array(
                name,
                shape=shape,
                chunks=chunks,
                dtype=dtype,
                fill_value=fill,
                compressors=chunking.compressors(dtype.itemsize),
                filters=None,
                attributes={"columns": list(ROW_COLUMNS)} if name == "rows" else {},
                chunk_key_encoding={"name": "default", "separator": "/"},
            )
            seg._io[name] = ChunkedArray.from_zarr(seg.kv, name, arr)
        return seg

    @classmethod
    def open(cls, url: str, writer_id: str, storage_options: dict[str, Any] | None) -> Segment:
        """Open an existing segment read-only."""
        import zarr

        store = open_zarr_store(join(url, SEGMENTS, writer_id), storage_options, read_only=True)
        root = zarr.open_group(store, mode="r")
        info: Any = root.attrs["nexrl_segment"]
        chunking = Chunking(**info["chunking"])
        return cls(root, chunking, writer_id, url, storage_options)

    def array(self, name: str) -> Any:
        """The zarr array ``name`` (for analysis through zarr/dask)."""
        return self.root[name]

    def io(self, name: str) -> ChunkedArray:
        arr = self._io.get(name)
        if arr is None:
            arr = self._io[name] = ChunkedArray.from_zarr(self.kv, name, self.root[name])
        return arr

    # -- write -------------------------------------------------------------
    def write(
        self,
        cols: TrajectoryColumns,
        pos: Positions,
        metric_columns: dict[str, int],
        *,
        weight_sync: bool,
        created_ns: int,
        fsync: bool = False,
    ) -> None:
        """Write ``cols`` at ``pos`` (chunk-aligned). Data first; the caller commits after."""
        n = len(cols)
        rows = np.empty((n, len(ROW_COLUMNS)), dtype=np.int64)
        rows[:, COL["group_id"]] = cols.group_id
        rows[:, COL["run_id"]] = cols.run_id
        rows[:, COL["policy_version"]] = cols.policy_version
        rows[:, COL["policy_version_last"]] = cols.policy_version_last
        rows[:, COL["prompt_off"]] = pos.prompt + offsets_of(cols.prompt_lens)[:-1]
        rows[:, COL["prompt_len"]] = cols.prompt_lens
        rows[:, COL["response_off"]] = pos.response + offsets_of(cols.response_lens)[:-1]
        rows[:, COL["response_len"]] = cols.response_lens
        rows[:, COL["meta_off"]] = pos.meta + offsets_of(cols.meta_lens)[:-1]
        rows[:, COL["meta_len"]] = cols.meta_lens
        rows[:, COL["weight_sync"]] = int(weight_sync)
        rows[:, COL["created_ns"]] = created_ns
        width = 1 + (max(metric_columns.values()) if metric_columns else 0)
        values = np.full((n, width), np.nan, dtype=np.float32)
        values[:, 0] = cols.reward
        for name, arr in cols.metrics.items():
            if name in metric_columns:
                values[:, metric_columns[name]] = arr

        blocks = {
            "prompt_ids": (pos.prompt, cols.prompt_ids),
            "response_ids": (pos.response, cols.response_ids),
            "loss_mask": (pos.response, cols.loss_mask),
            "logprobs": (pos.response, cols.logprobs),
            "meta": (pos.meta, cols.meta_bytes),
            "values": (pos.row, values),
            "rows": (pos.row, rows),
        }
        chunks: dict[str, bytes] = {}
        for name, (start, data) in blocks.items():
            if len(data):
                chunks.update(self.io(name).encode_block(start, data))
        self.kv.put_many(chunks, fsync=fsync)

    # -- read --------------------------------------------------------------
    def read_index(self, blocks: list[tuple[int, int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``rows`` (n, 11) int64 and ``values`` (n, 1 + m) float32 of committed blocks
        given as ``(row_start, n, m)``."""
        rows = self.io("rows").rows([(r, n, len(ROW_COLUMNS)) for r, n, _ in blocks])
        values = self.io("values").rows([(r, n, 1 + m) for r, n, m in blocks])
        return list(zip(rows, values, strict=True))

    def read_meta(self, rows: np.ndarray) -> list[str]:
        """The meta JSON strings of the trajectories described by ``rows``."""
        flat = self.io("meta").take_ranges(rows[:, COL["meta_off"]], rows[:, COL["meta_len"]])
        off = offsets_of(rows[:, COL["meta_len"]])
        raw = flat.tobytes()
        return [raw[off[i] : off[i + 1]].decode() for i in range(len(rows))]

    def read_ragged(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Flat token/meta arrays of the trajectories described by ``rows``, in that order."""
        spans = {
            "prompt_ids": ("prompt_off", "prompt_len"),
            "response_ids": ("response_off", "response_len"),
            "loss_mask": ("response_off", "response_len"),
            "logprobs": ("response_off", "response_len"),
            "meta": ("meta_off", "meta_len"),
        }
        out: dict[str, np.ndarray] = {}
        for name, (off, ln) in spans.items():
            out[name] = self.io(name).take_ranges(rows[:, COL[off]], rows[:, COL[ln]])
        return out


def read_columns(
    segment: Segment, rows: np.ndarray, values: np.ndarray, metric_names: tuple[str, ...]
) -> TrajectoryColumns:
    """Whole trajectories of one segment: ``rows``/``values`` from its index, tokens read now.

    ``values[:, 1 + i]`` holds metric ``metric_names[i]``; NaN means "no value".
    """
    flat = segment.read_ragged(rows)
    return TrajectoryColumns(
        prompt_ids=flat["prompt_ids"],
        prompt_lens=rows[:, COL["prompt_len"]].copy(),
        response_ids=flat["response_ids"],
        loss_mask=flat["loss_mask"],
        logprobs=flat["logprobs"],
        response_lens=rows[:, COL["response_len"]].copy(),
        reward=values[:, 0].astype(np.float32),
        group_id=rows[:, COL["group_id"]].copy(),
        run_id=rows[:, COL["run_id"]].astype(np.int32),
        policy_version=rows[:, COL["policy_version"]].copy(),
        policy_version_last=rows[:, COL["policy_version_last"]].copy(),
        meta_bytes=flat["meta"],
        meta_lens=rows[:, COL["meta_len"]].copy(),
        metrics={
            name: values[:, 1 + i].astype(np.float32)
            for i, name in enumerate(metric_names)
            if 1 + i < values.shape[1]
        },
    )
