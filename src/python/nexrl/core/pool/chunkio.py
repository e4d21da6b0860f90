"""Whole-chunk I/O for a segment's zarr arrays, without zarr-python's per-call overhead.

The pool writes blocks at chunk boundaries and reads a batch's trajectories
from a few chunks per array. Doing that through ``zarr.Array.__setitem__`` /
``__getitem__`` costs ~2 ms of Python per call on top of the real work
(measured, docs/pool.md); this module encodes and decodes the chunks itself,
producing exactly what zarr writes for these arrays: the v3 ``bytes`` codec
(little endian, C order) followed by Blosc, keys ``<array>/c/<i>[/<j>]``
(default chunk key encoding, "/" separator). Arrays are created by zarr and
stay readable by zarr, xarray and dask; the tests check both directions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nexrl.core.pool.kv import KVStore

__all__ = ["ChunkedArray"]


@dataclass
class ChunkedArray:
    """One 1-D or 2-D array of a segment: ``name`` under the segment root in ``kv``."""

    kv: KVStore
    name: str
    chunks: tuple[int, ...]
    dtype: np.dtype
    fill: Any
    codec: Any  # numcodecs codec or None
    width: int = 0  # columns of a 2-D array (0 for 1-D)

    @classmethod
    def from_zarr(cls, kv: KVStore, name: str, arr: Any) -> ChunkedArray:
        """Describe a zarr array created by ``Segment.create`` (raises if its codecs differ)."""
        import numcodecs

        meta = arr.metadata
        codecs = [c.to_dict() for c in meta.codecs]
        names = [c["name"] for c in codecs]
        if names not in (["bytes"], ["bytes", "blosc"]) or (
            codecs[0].get("configuration", {}).get("endian", "little") != "little"
        ):
            raise ValueError(f"{name}: unsupported codecs {names} for direct chunk I/O")
        codec = None
        if len(codecs) == 2:
            cfg = codecs[1]["configuration"]
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[cfg["shuffle"]]
            codec = numcodecs.Blosc(
                cname=cfg["cname"],
                clevel=cfg["clevel"],
                shuffle=shuffle,
                blocksize=cfg.get("blocksize", 0),
            )
        width = int(arr.shape[1]) if arr.ndim == 2 else 0
        dtype = np.dtype(arr.dtype).newbyteorder("<")
        return cls(kv, name, tuple(arr.chunks), dtype, arr.fill_value, codec, width)

    # -- keys and codecs ---------------------------------------------------
    def _key(self, i: int, j: int | None = None) -> str:
        return f"{self.name}/c/{i}" if j is None else f"{self.name}/c/{i}/{j}"

    def _encode(self, chunk: np.ndarray) -> bytes:
        arr = np.ascontiguousarray(chunk, dtype=self.dtype)
        return bytes(self.codec.encode(arr)) if self.codec is not None else arr.tobytes()

    def _decode(self, raw: bytes | None) -> np.ndarray:
        if raw is None:
            return np.full(self.chunks, self.fill, dtype=self.dtype)
        data = self.codec.decode(raw) if self.codec is not None else raw
        return np.frombuffer(data, dtype=self.dtype).reshape(self.chunks)

    # -- write -------------------------------------------------------------
    def encode_block(self, start: int, data: np.ndarray) -> dict[str, bytes]:
        """Chunks holding ``data`` at rows ``start..`` (``start`` on a chunk boundary); the
        tail of the last chunk (and of the last column chunk) is the fill value."""
        c0 = self.chunks[0]
        if start % c0:
            raise ValueError(f"{self.name}: block start {start} is not chunk-aligned")
        n = data.shape[0]
        out: dict[str, bytes] = {}
        for k in range(-(-n // c0)):
            part = data[k * c0 : (k + 1) * c0]
            i = start // c0 + k
            if self.width == 0:
                chunk = np.full(self.chunks, self.fill, dtype=self.dtype)
                chunk[: len(part)] = part
                out[self._key(i)] = self._encode(chunk)
                continue
            c1 = self.chunks[1]
            for j in range(-(-part.shape[1] // c1)):
                chunk = np.full(self.chunks, self.fill, dtype=self.dtype)
                cols = part[:, j * c1 : (j + 1) * c1]
                chunk[: cols.shape[0], : cols.shape[1]] = cols
                out[self._key(i, j)] = self._encode(chunk)
        return out

    # -- read --------------------------------------------------------------
    def fetch(
        self, chunk_ids: list[tuple[int, int | None]]
    ) -> dict[tuple[int, int | None], np.ndarray]:
        keys = {self._key(i, j): (i, j) for i, j in chunk_ids}
        got = self.kv.get_many(list(keys))
        return {ij: self._decode(got.get(k)) for k, ij in keys.items()}

    def take_ranges(self, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Concatenation of ``arr[s : s + l]`` for each pair of a 1-D array, reading each
        needed chunk once."""
        starts = np.asarray(starts, dtype=np.int64)
        lens = np.asarray(lens, dtype=np.int64)
        out = np.empty(int(lens.sum()), dtype=self.dtype)
        keep = lens > 0
        starts, lens = starts[keep], lens[keep]
        if len(starts) == 0:
            return out
        # merge ranges that continue each other (trajectories of one commit, in order)
        new = np.ones(len(starts), dtype=bool)
        new[1:] = starts[1:] != starts[:-1] + lens[:-1]
        group = np.cumsum(new) - 1
        m_starts = starts[new]
        m_lens = np.bincount(group, weights=lens).astype(np.int64)
        c0 = self.chunks[0]
        first, last = m_starts // c0, (m_starts + m_lens - 1) // c0
        ids = np.unique(
            np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last, strict=True)])
        )
        chunks = self.fetch([(int(i), None) for i in ids])
        pos = 0
        for s, n in zip(m_starts.tolist(), m_lens.tolist(), strict=True):
            while n > 0:
                i, o = divmod(s, c0)
                k = min(n, c0 - o)
                out[pos : pos + k] = chunks[(i, None)][o : o + k]
                pos, s, n = pos + k, s + k, n - k
        return out

    def rows(self, blocks: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """For each ``(start, n, ncols)``: rows ``start..start+n``, first ``ncols`` columns,
        of a 2-D array; all chunks fetched in one round."""
        c0, c1 = self.chunks
        plans = []
        wanted: set[tuple[int, int | None]] = set()
        for start, n, ncols in blocks:
            ids_i = range(start // c0, -(-(start + n) // c0))
            ids_j = range(-(-ncols // c1))
            plans.append((start, n, ncols, ids_i, ids_j))
            wanted.update((i, j) for i in ids_i for j in ids_j)
        chunks = self.fetch(sorted(wanted, key=lambda ij: (ij[0], ij[1] or 0)))
        out = []
        for start, n, ncols, ids_i, ids_j in plans:
            grid = np.block([[chunks[(i, j)] for j in ids_j] for i in ids_i])
            off = start - ids_i[0] * c0
            out.append(grid[off : off + n, :ncols])
        return out
