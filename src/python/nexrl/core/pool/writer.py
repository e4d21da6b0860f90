"""``PoolWriter``: appends trajectories to the pool from any process.

Each writer owns a fresh segment (``segments/<writer_id>``, writer id = uuid4)
and is the only process that ever writes there. ``append`` writes the block's
arrays at chunk-aligned positions, then publishes its commit marker: the block
becomes visible to readers at that single atomic step. If the process dies
before, the block's chunks are orphans no reader looks at; if writing fails
with an exception, the positions have already moved past the block, so a retry
never writes into a chunk that may hold a partial write. A failed or uncertain
marker write retires the segment (the next append starts a new writer id), so
no marker name is ever written twice.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nexrl.core.pool.columns import PoolDataError, TrajectoryColumns
from nexrl.core.pool.commits import CommitLog, CommitMarker
from nexrl.core.pool.kv import KVStore, open_kv
from nexrl.core.pool.layout import CONTROL, MAX_METRICS, Chunking, ensure_pool
from nexrl.core.pool.segment import Positions, Segment

if TYPE_CHECKING:
    from nexrl.core.config.sections.pool import TrajectoryPoolConfig
    from nexrl.core.types.trajectory import Trajectory

__all__ = ["PoolWriter", "get_writer", "read_weight_sync"]

log = logging.getLogger(__name__)
WEIGHT_SYNC_KEY = f"{CONTROL}/weight_sync.json"


def read_weight_sync(kv: KVStore) -> dict[str, Any]:
    """The control flag ``{"active": bool, "version": int | None, ...}`` ({} if never set)."""
    raw = kv.get(WEIGHT_SYNC_KEY)
    return {} if raw is None else dict(json.loads(raw))


class PoolWriter:
    """Appends blocks of trajectories; thread-safe; one segment per writer id."""

    def __init__(
        self,
        url: str,
        *,
        storage_options: dict[str, Any] | None = None,
        chunking: Chunking | None = None,
        tag_weight_sync: bool = True,
        fsync: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.clock = clock
        self.storage_options = storage_options
        self.chunking = chunking or Chunking()
        self.tag_weight_sync = tag_weight_sync
        self.fsync = fsync
        self.kv = open_kv(url, storage_options)
        self.log = CommitLog(self.kv)
        ensure_pool(self.kv)
        self._lock = threading.Lock()
        self._segment: Segment | None = None
        self._seq = 0
        self._pos = Positions()
        self._metric_cols: dict[str, int] = {}
        self._warned_metrics = False
        self.appended = 0  # trajectories committed by this object (all its segments)

    @classmethod
    def from_config(cls, config: TrajectoryPoolConfig) -> PoolWriter:
        """A writer with the store, chunking and options of a ``trajectory_pool`` config."""
        return cls(
            config.store,
            storage_options=dict(config.storage_options) or None,
            chunking=Chunking(**config.chunking),
            tag_weight_sync=config.tag_weight_sync,
            fsync=config.fsync,
        )

    def open(self) -> str:
        """Create this writer's segment now (else the first ``append`` does); returns its id."""
        with self._lock:
            if self._segment is None:
                self._new_segment()
            assert self._segment is not None
            return self._segment.writer_id

    @property
    def writer_id(self) -> str | None:
        """The current segment's id (None before the first append)."""
        return None if self._segment is None else self._segment.writer_id

    def append(self, trajectories: Sequence[Trajectory] | TrajectoryColumns) -> CommitMarker:
        """Write ``trajectories`` and make them visible atomically; returns the commit marker.

        Raises ``PoolDataError`` for malformed data (nothing is written) and the
        storage error if writing fails (nothing becomes visible).
        """
        cols = (
            trajectories
            if isinstance(trajectories, TrajectoryColumns)
            else TrajectoryColumns.from_trajectories(trajectories)
        )
        cols.validate()
        if len(cols) == 0:
            raise PoolDataError("trajectories: nothing to append (empty block)")
        with self._lock:
            return self._append(cols)

    def _append(self, cols: TrajectoryColumns) -> CommitMarker:
        pos = self._pos.aligned(self.chunking)
        if self._segment is None or not pos.after(cols).aligned(self.chunking).fits():
            self._new_segment()
            pos = self._pos
        assert self._segment is not None
        metric_names = self._register_metrics(cols)
        sync = bool(read_weight_sync(self.kv).get("active")) if self.tag_weight_sync else False
        # Move past this block before writing: a failed write is never overwritten.
        self._pos = pos.after(cols)
        self._segment.write(
            cols,
            pos,
            self._metric_cols,
            weight_sync=sync,
            created_ns=int(self.clock() * 1e9),
            fsync=self.fsync,
        )
        marker = CommitMarker(
            writer=self._segment.writer_id,
            seq=self._seq,
            n=len(cols),
            row=pos.row,
            prompt=(pos.prompt, pos.prompt + len(cols.prompt_ids)),
            response=(pos.response, pos.response + len(cols.response_ids)),
            meta=(pos.meta, pos.meta + len(cols.meta_bytes)),
            metrics=metric_names,
            time=self.clock(),
            weight_sync=sync,
            min_version=int(cols.policy_version.min()) if len(cols) else 0,
            max_version=int(cols.policy_version.max()) if len(cols) else 0,
            nbytes=cols.nbytes,
        )
        try:
            ok = self.log.write(marker, fsync=self.fsync)
        except BaseException:
            self._segment = None  # outcome unknown: never reuse this marker name
            raise
        if not ok:  # cannot happen with unique writer ids; refuse to guess
            self._segment = None
            raise RuntimeError(f"commit marker {marker.key()} already exists")
        self._seq += 1
        self.appended += len(cols)
        return marker

    def _new_segment(self) -> None:
        writer_id = uuid.uuid4().hex
        self._segment = Segment.create(self.url, writer_id, self.chunking, self.storage_options)
        self._seq = 0
        self._pos = Positions()
        self._metric_cols = {}

    def _register_metrics(self, cols: TrajectoryColumns) -> tuple[str, ...]:
        for name in sorted(cols.metrics):
            if name in self._metric_cols:
                continue
            if len(self._metric_cols) >= MAX_METRICS:
                if not self._warned_metrics:
                    log.warning(
                        "more than %d metric names in one writer: metric %r is kept "
                        "only in the trajectory meta JSON",
                        MAX_METRICS,
                        name,
                    )
                    self._warned_metrics = True
                continue
            self._metric_cols[name] = 1 + len(self._metric_cols)
        return tuple(self._metric_cols)

    def close(self) -> None:
        """Forget the segment; the next append (if any) starts a new one."""
        with self._lock:
            self._segment = None


_WRITERS: dict[tuple[str, int], PoolWriter] = {}
_WRITERS_LOCK = threading.Lock()


def get_writer(config: TrajectoryPoolConfig) -> PoolWriter:
    """The per-process writer for a pool config (for rollout tasks running on Dask workers:
    one segment per worker process instead of one per task)."""
    key = (config.store, os.getpid())
    with _WRITERS_LOCK:
        w = _WRITERS.get(key)
        if w is None:
            w = _WRITERS[key] = PoolWriter.from_config(config)
        return w
