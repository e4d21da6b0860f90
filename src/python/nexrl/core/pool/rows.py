"""``PoolRows``: trajectories by their place in a pool, small enough to send anywhere.

The consumer's index already holds, for every committed trajectory, its row of
``rows`` columns (where its tokens are in its writer's segment: ``prompt_off``,
``response_len``, ...) and its reward and metric values. ``PoolRows`` is that
information for a chosen set of trajectories, in a chosen order, plus the
store's address: a few hundred bytes a trajectory, whatever its length. Any
process that can open the store reads the tokens itself (``read``)::

    rows = pool_batch.rows.take(keep)      # the driver: which trajectories, in order
    cols = rows.read()                     # a trainer rank: their tokens, from zarr

This is how a step's batch reaches the trainer ranks (``nexrl.trainer.batch_io``):
the driver never pads or writes the step's tokens. Segments are created once at a
fixed capacity and never move (``nexrl.core.pool.segment``), so an address stays
valid for as long as the store exists, and a process keeps its opened segments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.core.pool.layout import COL, ROW_COLUMNS
from nexrl.core.pool.segment import Segment, read_columns

__all__ = ["PoolRows"]

_SEGMENTS: dict[tuple[str, str], Segment] = {}  # (store, writer) -> opened segment
_LOCK = threading.Lock()


def _open(store: str, storage_options: dict[str, Any] | None) -> Callable[[str], Segment]:
    """A segment opener that keeps each (store, writer) segment open in this process."""

    def segment(writer: str) -> Segment:
        key = (store, writer)
        with _LOCK:
            seg = _SEGMENTS.get(key)
        if seg is None:
            seg = Segment.open(store, writer, storage_options)
            with _LOCK:
                seg = _SEGMENTS.setdefault(key, seg)
        return seg

    return segment


@dataclass(frozen=True)
class PoolRows:
    """``n`` trajectories of the pool at ``store``: for each, its writer, its ``rows``
    columns (``nexrl.core.pool.layout.ROW_COLUMNS``) and its values (reward, then the
    writer's metrics, NaN-padded)."""

    store: str
    storage_options: dict[str, Any] | None
    writers: tuple[str, ...]
    metric_names: tuple[tuple[str, ...], ...]  # per writer: the names of values[:, 1:]
    writer: np.ndarray  # (n,) int32: index into writers
    rows: np.ndarray  # (n, len(ROW_COLUMNS)) int64
    values: np.ndarray  # (n, 1 + most metrics of a writer) float32

    def __len__(self) -> int:
        return len(self.writer)

    def take(self, index: Sequence[int] | np.ndarray) -> PoolRows:
        """These trajectories, in the order of ``index``."""
        idx = np.asarray(index, dtype=np.int64)
        return PoolRows(
            self.store,
            self.storage_options,
            self.writers,
            self.metric_names,
            self.writer[idx],
            self.rows[idx],
            self.values[idx],
        )

    def tokens(self) -> np.ndarray:
        """Prompt + response tokens of each trajectory (no read: from the index rows)."""
        return self.rows[:, COL["prompt_len"]] + self.rows[:, COL["response_len"]]

    def read(self, segment: Callable[[str], Segment] | None = None) -> TrajectoryColumns:
        """The trajectories, whole and in order; tokens read from the store now.
        ``segment``: the caller's segment opener (the consumer's index passes its own)."""
        open_segment = segment or _open(self.store, self.storage_options)
        blocks: list[TrajectoryColumns] = []
        order: list[np.ndarray] = []
        for w in np.unique(self.writer).tolist():
            pos = np.flatnonzero(self.writer == w)
            names = self.metric_names[w]
            values = self.values[pos, : 1 + len(names)]
            blocks.append(
                read_columns(open_segment(self.writers[w]), self.rows[pos], values, names)
            )
            order.append(pos)
        if not blocks:
            raise ValueError("PoolRows.read: no trajectories")
        cols = TrajectoryColumns.concat(blocks)
        return cols.take(np.argsort(np.concatenate(order), kind="stable"))

    # -- on the wire (the training service's JSON) ---------------------------------
    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (``from_json`` reads it back exactly; NaN as null)."""
        values = [[None if v != v else float(v) for v in row] for row in self.values.tolist()]
        return {
            "store": self.store,
            "storage_options": self.storage_options,
            "writers": list(self.writers),
            "metric_names": [list(n) for n in self.metric_names],
            "writer": self.writer.tolist(),
            "rows": self.rows.tolist(),
            "values": values,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PoolRows:
        rows = np.asarray(doc["rows"], dtype=np.int64).reshape(-1, len(ROW_COLUMNS))
        values = np.asarray(
            [[np.nan if v is None else v for v in row] for row in doc["values"]], dtype=np.float32
        ).reshape(len(rows), -1)
        return cls(
            str(doc["store"]),
            doc.get("storage_options"),
            tuple(str(w) for w in doc["writers"]),
            tuple(tuple(str(n) for n in names) for names in doc["metric_names"]),
            np.asarray(doc["writer"], dtype=np.int32),
            rows,
            values,
        )
