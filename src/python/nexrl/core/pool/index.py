"""The reader's index: committed blocks discovered, indexed lazily, grouped.

Markers are cheap to find (``CommitLog.scan``); a block's per-trajectory index
rows (group keys, versions, offsets) are read only when the reader needs more
ready trajectories, oldest commit first. So the work and memory of fetching a
batch depend on the batch and the backlog it needs, not on how many
trajectories the pool holds. Token data is read only for the trajectories of a
batch (``read``).

With ``dedup`` each group id is taken from one commit, the first indexed (oldest
commit first): trajectories of a group id that the cursor already handled, or that
another pending commit holds, are set aside in ``duplicates`` instead of being
grouped (a Dask task that ran twice committed its groups twice); the pool drops them.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.core.pool.commits import CommitLog, CommitMarker
from nexrl.core.pool.cursor import Cursor, in_ranges
from nexrl.core.pool.grouping import GroupIndex
from nexrl.core.pool.layout import COL, ROW_COLUMNS
from nexrl.core.pool.rows import PoolRows
from nexrl.core.pool.segment import Segment

__all__ = ["PoolIndex"]

_SHIFT = 32  # ref = entry id << 32 | index within the block
_MASK = (1 << _SHIFT) - 1


@dataclass
class Entry:
    """An indexed part ``[base, base + len(rows))`` of a commit's block."""

    marker: CommitMarker
    base: int
    rows: np.ndarray  # (k, len(ROW_COLUMNS)) int64
    values: np.ndarray  # (k, 1 + len(marker.metrics)) float32
    remaining: int  # trajectories of this part not handled yet


def _hashable(v: Any) -> Hashable:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True)
    return v


class PoolIndex:
    """Pending (committed, not yet handled) trajectories of one consumer."""

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None,
        log: CommitLog,
        cursor: Cursor,
        key_list: Sequence[str],
        group_size: int,
        segments: dict[str, Segment] | None = None,
        dedup: bool = False,
    ) -> None:
        self.url, self.storage_options, self.log = url, storage_options, log
        self.cursor = cursor
        self.key_list = list(key_list)
        self.groups = GroupIndex(group_size, grouped=bool(self.key_list))
        self._seen: dict[str, int] = {}  # per writer: next marker number to discover
        # The next unindexed commit (part) of each writer, oldest first:
        # (time, writer, seq, first index, marker). Later markers are re-read when their
        # turn comes, so memory holds one marker per writer, not one per pending commit.
        self._heap: list[tuple[float, str, int, int, CommitMarker]] = []
        self._queued: set[str] = set()  # writers with an entry in the heap
        self.entries: dict[int, Entry] = {}
        self._next_entry = 0
        self.segments: dict[str, Segment] = {} if segments is None else segments
        self.pending = 0  # committed and not handled (indexed or not)
        self.unindexed = 0
        self.dedup = dedup
        self.origin: dict[int, tuple[str, int]] = {}  # pending group id -> its commit
        self.duplicates: list[int] = []  # refs of second copies, not grouped

    # -- discovery ---------------------------------------------------------
    def scan(self) -> int:
        """Find new commits; returns how many new pending trajectories they hold."""
        new = 0
        for writer in self.log.writers():
            seq = self._seen.get(writer, self.cursor.done(writer))
            while (m := self.log.read(writer, seq)) is not None:
                left = self._left(m)
                self.pending += left
                self.unindexed += left
                new += left
                if left and writer not in self._queued:
                    self._push(m, 0)
                seq += 1
            self._seen[writer] = seq
        return new

    def _left(self, m: CommitMarker) -> int:
        handled = self.cursor.handled(m.writer, m.seq)
        return 0 if handled is None else m.n - len(handled)

    def _push(self, m: CommitMarker, start: int) -> None:
        heapq.heappush(self._heap, (m.time, m.writer, m.seq, start, m))
        self._queued.add(m.writer)

    def _queue_next(self, writer: str, seq: int) -> None:
        """Queue the writer's first commit from ``seq`` on that still has pending trajectories."""
        self._queued.discard(writer)
        while seq < self._seen[writer]:
            m = self.log.read(writer, seq)
            if m is not None and self._left(m):
                self._push(m, 0)
                return
            seq += 1

    def horizon(self, now: float) -> float:
        """Time up to which every commit is indexed (``now`` when all are)."""
        return min(now, self._heap[0][0]) if self._heap else now

    @property
    def has_unindexed(self) -> bool:
        return bool(self._heap)

    # -- indexing ----------------------------------------------------------
    def segment(self, writer: str) -> Segment:
        seg = self.segments.get(writer)
        if seg is None:
            seg = self.segments[writer] = Segment.open(self.url, writer, self.storage_options)
        return seg

    def index_more(self, need: int | None) -> bool:
        """Index the oldest unindexed trajectories, at least ``need`` of them (None: all);
        a large commit is indexed a few row chunks at a time. False if nothing was left."""
        if not self._heap:
            return False
        parts: list[tuple[CommitMarker, int, int]] = []  # (marker, start, stop)
        got = 0
        while self._heap and (need is None or got < need):
            _, writer, seq, start, m = heapq.heappop(self._heap)
            stop = m.n
            if need is not None:
                rc = self.segment(writer).chunking.row_chunk
                stop = min(m.n, -(-(start + need - got) // rc) * rc)
            if stop < m.n:
                self._push(m, stop)
            else:
                self._queue_next(writer, seq + 1)
            parts.append((m, start, stop))
            got += stop - start
        by_writer: dict[str, list[tuple[CommitMarker, int, int]]] = {}
        for part in parts:
            by_writer.setdefault(part[0].writer, []).append(part)
        blocks: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}
        for writer, ps in by_writer.items():
            spans = [(m.row + a, b - a, len(m.metrics)) for m, a, b in ps]
            read = self.segment(writer).read_index(spans)
            blocks.update({(writer, m.seq, a): rv for (m, a, _), rv in zip(ps, read, strict=True)})
        for m, a, b in parts:  # oldest first, so groups fill in arrival order
            self._add(m, a, b, *blocks[(m.writer, m.seq, a)])
        return True

    def _add(
        self, m: CommitMarker, start: int, stop: int, rows: np.ndarray, values: np.ndarray
    ) -> None:
        handled = self.cursor.handled(m.writer, m.seq)
        span = np.arange(start, stop)
        todo = np.setdiff1d(span, span if handled is None else handled)
        self.unindexed -= stop - start if handled is None else len(todo)
        if len(todo) == 0:
            return
        eid = self._next_entry
        self._next_entry += 1
        self.entries[eid] = Entry(m, start, rows, values, len(todo))
        if self.dedup:
            copy = self._copies(m, rows[todo - start, COL["group_id"]])
            self.duplicates.extend(((eid << _SHIFT) | todo[copy]).tolist())
            todo = todo[~copy]
        keys = self._keys(self.segment(m.writer), rows, todo - start)
        for i, key in zip(todo.tolist(), keys, strict=True):
            self.groups.add((eid << _SHIFT) | i, key, m.time)

    def _copies(self, m: CommitMarker, gids: np.ndarray) -> np.ndarray:
        """Mask of ``gids`` (of commit ``m``) that are second copies of a group."""
        here = (m.writer, m.seq)
        copy = in_ranges(self.cursor.groups, gids)
        for k, gid in enumerate(gids.tolist()):
            if not copy[k]:
                copy[k] = self.origin.setdefault(gid, here) != here
        return copy

    def take_duplicates(self) -> list[int]:
        """The second copies indexed since the last call (the caller drops them)."""
        out, self.duplicates = self.duplicates, []
        return out

    def _keys(self, seg: Segment, rows: np.ndarray, todo: np.ndarray) -> list[Hashable]:
        if not self.key_list:
            return [None] * len(todo)
        metas: list[dict[str, Any]] | None = None
        cols: list[list[Hashable]] = []
        for key in self.key_list:
            if key in COL:
                cols.append(rows[todo, COL[key]].tolist())
                continue
            if metas is None:
                metas = [json.loads(s) for s in seg.read_meta(rows[todo])]
            head, *path = key.split(".")
            vals: list[Hashable] = []
            for meta in metas:
                v: Any = meta.get(head, {})
                for p in path:
                    v = v.get(p) if isinstance(v, dict) else None
                vals.append(_hashable(v))
            cols.append(vals)
        return list(zip(*cols, strict=True))

    # -- refs --------------------------------------------------------------
    def locate(self, ref: int) -> tuple[Entry, int]:
        return self.entries[ref >> _SHIFT], ref & _MASK

    def split(self, refs: Sequence[int]) -> list[tuple[Entry, np.ndarray, np.ndarray]]:
        """Group ``refs`` by commit: ``(entry, positions in refs, indices in the block)``."""
        arr = np.asarray(refs, dtype=np.int64)
        eids = arr >> _SHIFT
        order = np.argsort(eids, kind="stable")
        uniq, starts = np.unique(eids[order], return_index=True)
        bounds = [*starts.tolist(), len(arr)]
        out = []
        for k, eid in enumerate(uniq.tolist()):
            pos = order[bounds[k] : bounds[k + 1]]
            out.append((self.entries[eid], pos, arr[pos] & _MASK))
        return out

    def column(self, refs: Sequence[int], name: str) -> np.ndarray:
        """One ``rows`` column for ``refs``."""
        out = np.empty(len(refs), dtype=np.int64)
        for e, pos, idx in self.split(refs):
            out[pos] = e.rows[idx - e.base, COL[name]]
        return out

    def rewards(self, refs: Sequence[int]) -> np.ndarray:
        """The reward of each ref (column 0 of the in-memory ``values``; no disk read)."""
        out = np.empty(len(refs), dtype=np.float64)
        for e, pos, idx in self.split(refs):
            out[pos] = e.values[idx - e.base, 0]
        return out

    def ids(self, refs: Sequence[int]) -> list[tuple[str, int, int]]:
        """``(writer, commit seq, index)`` of each ref."""
        out: list[tuple[str, int, int]] = [("", 0, 0)] * len(refs)
        for e, pos, idx in self.split(refs):
            for p, i in zip(pos.tolist(), idx.tolist(), strict=True):
                out[p] = (e.marker.writer, e.marker.seq, i)
        return out

    def by_commit(self, refs: Sequence[int]) -> dict[tuple[str, int], tuple[np.ndarray, int]]:
        """(writer, seq) -> (indices, block size) of ``refs`` (a commit may span entries)."""
        out: dict[tuple[str, int], tuple[np.ndarray, int]] = {}
        for e, _, idx in self.split(refs):
            key = (e.marker.writer, e.marker.seq)
            prev = out.get(key)
            out[key] = (idx if prev is None else np.concatenate([prev[0], idx]), e.marker.n)
        return out

    def forget(self, refs: Sequence[int]) -> None:
        """``refs`` are handled: release their index memory."""
        for e, pos, _ in self.split(refs):
            e.remaining -= len(pos)
        if self.dedup and self.origin:  # handled group ids are in the cursor now
            gids = self.column(refs, "group_id")
            for gid in gids[in_ranges(self.cursor.groups, gids)].tolist():
                self.origin.pop(gid, None)
        for eid in np.unique(np.asarray(refs, dtype=np.int64) >> _SHIFT).tolist():
            if self.entries[eid].remaining == 0:
                del self.entries[eid]
        self.pending -= len(refs)

    def address(self, refs: Sequence[int]) -> PoolRows:
        """Where ``refs`` are, in that order: their writers, index rows and values (no read)."""
        parts = self.split(refs)
        writers = tuple(dict.fromkeys(e.marker.writer for e, _, _ in parts))
        names: dict[str, tuple[str, ...]] = {w: () for w in writers}
        for e, _, _ in parts:  # a writer's later commits may carry more metric names
            if len(e.marker.metrics) > len(names[e.marker.writer]):
                names[e.marker.writer] = tuple(e.marker.metrics)
        width = 1 + max((len(n) for n in names.values()), default=0)
        writer = np.empty(len(refs), dtype=np.int32)
        rows = np.empty((len(refs), len(ROW_COLUMNS)), dtype=np.int64)
        values = np.full((len(refs), width), np.nan, dtype=np.float32)
        for e, pos, idx in parts:
            writer[pos] = writers.index(e.marker.writer)
            rows[pos] = e.rows[idx - e.base]
            values[pos, : e.values.shape[1]] = e.values[idx - e.base]
        return PoolRows(
            self.url,
            self.storage_options,
            writers,
            tuple(names[w] for w in writers),
            writer,
            rows,
            values,
        )

    def read(self, refs: Sequence[int]) -> TrajectoryColumns:
        """Whole trajectories for ``refs``, in that order (tokens read only for these)."""
        return self.address(refs).read(self.segment)
