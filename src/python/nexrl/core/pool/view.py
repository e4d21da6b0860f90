"""``to_xarray``: the whole pool as a lazy ``xarray.Dataset`` for analysis and plots.

One ``trajectory`` dimension over every committed trajectory (writer by
writer, commits in order). Per-trajectory variables come lazily (dask) from
the segments' ``rows``/``values`` arrays: only what a computation touches is
read. Commit bookkeeping (``writer``, ``commit``, ``index``) and the delivery
record of the consumer (``step``, ``status``, from its cursor generations)
are small in-memory arrays.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nexrl.core.pool.commits import CommitLog, CommitMarker
from nexrl.core.pool.cursor import CursorStore, indices_of
from nexrl.core.pool.kv import KVStore, open_kv
from nexrl.core.pool.layout import COL, ROW_COLUMNS, PoolStoreError
from nexrl.core.pool.segment import Segment

__all__ = ["STATUS", "pool_to_xarray", "read_pool", "read_traces"]

STATUS = {"pending": 0, "delivered": 1, "dropped": 2}
ROW_VARS = (
    "group_id",
    "run_id",
    "policy_version",
    "policy_version_last",
    "prompt_len",
    "response_len",
)


class _Window:
    """The first ``n`` rows of a (huge, fixed-shape) zarr array, for ``dask.array.from_array``."""

    def __init__(self, arr: Any, n: int) -> None:
        self.arr, self.shape = arr, (n, *arr.shape[1:])
        self.dtype, self.ndim = arr.dtype, arr.ndim

    def __getitem__(self, key: Any) -> np.ndarray:
        return np.asarray(self.arr[key])


def _delivery(
    cursors: CursorStore, pos: dict[tuple[str, int], int], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(step, status) per trajectory, replaying the consumer's cursor generations."""
    # The state of generation g derives from g - 1, or from t for "rewind to t": walk
    # that chain back from the newest generation to find the events still in effect.
    log = dict(cursors.events())
    events: list[tuple[int, dict[str, Any]]] = []
    gen = max(log, default=0)
    while gen > 0:
        last = log.get(gen, {})
        if last.get("event") == "rewind":
            gen = int(last["to"])
            continue
        if last.get("event") in ("batch", "drop"):
            events.append((gen, last))
        gen -= 1
    events.reverse()
    step = np.full(n, -1, np.int64)
    status = np.zeros(n, np.int8)
    for _, e in events:
        for writer, commits in e["members"].items():
            for seq, ranges in commits.items():
                start = pos.get((writer, int(seq)))
                if start is None:
                    continue
                at = start + indices_of(ranges)
                if e["event"] == "batch":
                    # Steps count from 1 (metrics.jsonl's step); older pools counted from 0.
                    first = int(e.get("step_base", 0))
                    step[at], status[at] = int(e["step"]) + 1 - first, STATUS["delivered"]
                else:
                    status[at] = STATUS["dropped"]
    return step, status


def _commits_in_order(kv: KVStore) -> tuple[list[CommitMarker], dict[str, list[CommitMarker]]]:
    """Every commit marker, and per writer (writers by first commit) its markers in
    order: the ``trajectory`` order of ``read_pool`` and ``read_traces``."""
    markers = CommitLog(kv).scan({})
    by_writer: dict[str, list[CommitMarker]] = {}
    for m in sorted(markers, key=lambda m: (m.time, m.writer, m.seq)):
        by_writer.setdefault(m.writer, []).append(m)
    for ms in by_writer.values():
        ms.sort(key=lambda m: m.seq)
    return markers, by_writer


def pool_to_xarray(
    url: str, storage_options: dict[str, Any] | None, kv: KVStore, cursors: CursorStore
) -> Any:
    import dask.array as da
    import xarray as xr

    markers, by_writer = _commits_in_order(kv)
    writers = list(by_writer)
    metric_names = sorted({name for m in markers for name in m.metrics})

    pos: dict[tuple[str, int], int] = {}
    seg_idx, commit, index = [], [], []
    rows_parts, values_parts = [], []
    metric_parts: dict[str, list[Any]] = {k: [] for k in metric_names}
    total = 0
    for w, writer in enumerate(writers):
        seg = Segment.open(url, writer, storage_options)
        mlist = by_writer[writer]
        end = max(m.row + m.n for m in mlist)
        sel = np.concatenate([np.arange(m.row, m.row + m.n) for m in mlist])
        for m in mlist:
            pos[(m.writer, m.seq)] = total
            seg_idx.append(np.full(m.n, w, np.int32))
            commit.append(np.full(m.n, m.seq, np.int64))
            index.append(np.arange(m.n, dtype=np.int64))
            total += m.n
        rows = seg.array("rows")
        rows_parts.append(
            da.from_array(
                _Window(rows, end),
                chunks=(seg.chunking.row_chunk, len(ROW_COLUMNS)),
                asarray=True,
                lock=False,
            )[sel]
        )
        seg_metrics = mlist[-1].metrics
        width = 1 + len(seg_metrics)
        vals = da.from_array(
            _Window(seg.array("values"), end),
            chunks=(seg.chunking.row_chunk, width),
            asarray=True,
            lock=False,
        )[:, :width][sel]
        values_parts.append(vals)
        for k in metric_names:
            if k in seg_metrics:
                metric_parts[k].append(vals[:, 1 + seg_metrics.index(k)])
            else:
                metric_parts[k].append(da.full(len(sel), np.nan, dtype=np.float32))

    dim = "trajectory"
    data: dict[str, Any] = {}
    if total:
        rows_all = da.concatenate(rows_parts)
        for name in ROW_VARS:
            data[name] = (dim, rows_all[:, COL[name]])
        data["weight_sync"] = (dim, rows_all[:, COL["weight_sync"]].astype(bool))
        data["committed_at"] = (dim, rows_all[:, COL["created_ns"]].astype("datetime64[ns]"))
        data["reward"] = (dim, da.concatenate([v[:, 0] for v in values_parts]))
        for k in metric_names:
            data[f"metric_{k}"] = (dim, da.concatenate(metric_parts[k]))
    step, status = _delivery(cursors, pos, total)

    def cat(parts: list[np.ndarray], dt: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dt)

    coords = {
        "writer": (dim, cat(seg_idx, np.int32)),
        "commit": (dim, cat(commit, np.int64)),
        "index": (dim, cat(index, np.int64)),
    }
    data["step"] = (dim, step)
    data["status"] = (dim, status)
    attrs = {
        "store": url,
        "writers": writers,
        "consumer": cursors.prefix.rsplit("/", 1)[-1],
        "status_codes": json.dumps(STATUS),
        "metrics": metric_names,
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _open(store: str, storage_options: dict[str, Any] | None) -> KVStore:
    kv = open_kv(store, storage_options)
    if kv.get("zarr.json") is None:
        raise PoolStoreError(
            f"{store}: no trajectory pool there; a run's pool is <output_dir>/pool.zarr"
        )
    return kv


def read_traces(
    store: str, storage_options: dict[str, Any] | None = None
) -> list[list[dict[str, Any]]]:
    """The agent traces of a run's pool, one list of spans per trajectory in
    ``read_pool``'s ``trajectory`` order ([] for one without: a single-turn rollout,
    or a pool written before traces). Spans: ``nexrl.core.types.trace``."""
    from nexrl.core.types.trace import trace_of

    kv = _open(store, storage_options)
    _, by_writer = _commits_in_order(kv)
    out: list[list[dict[str, Any]]] = []
    for writer, mlist in by_writer.items():
        seg = Segment.open(store, writer, storage_options)
        sel = np.concatenate([np.arange(m.row, m.row + m.n) for m in mlist])
        rows = np.asarray(seg.array("rows")[int(sel.min()) : int(sel.max()) + 1])
        for meta in seg.read_meta(rows[sel - int(sel.min())]):
            out.append(trace_of(json.loads(meta).get("extra_info")))
    return out


def read_pool(
    store: str, consumer: str = "trainer", storage_options: dict[str, Any] | None = None
) -> Any:
    """A run's pool (``runs/<experiment>/pool.zarr``, or any pool URL) as the lazy
    ``xarray.Dataset`` of ``to_xarray()``, read only: no recipe needed, and no consumer
    cursor is created or moved (``TrajectoryPool`` is the trainer's side and takes a
    ``PoolConfig``). ``step`` is the training step that took each trajectory (from 1,
    as in metrics.jsonl; -1: not trained on). The agent traces (ragged, JSON) are read
    by ``read_traces`` in the same order."""
    kv = _open(store, storage_options)
    return pool_to_xarray(store, storage_options, kv, CursorStore(kv, consumer))
