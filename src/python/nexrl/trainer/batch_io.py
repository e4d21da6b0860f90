"""How a step's batch reaches the trainer ranks: by its place in the pool, or in a file.

``BatchRef`` (the RL step): the trajectories' addresses in the trajectory pool
(``nexrl.core.pool.rows.PoolRows``) and the pad id. The driver sends it (a few
hundred bytes a trajectory); each rank reads the tokens from the pool itself and
lays them out (``load``), so the driver never pads or writes the step's tokens and
no batch file exists. A step retried after a crash reads the same rows again: the
pool's segments never change once written.

``save_batch`` / ``load_batch`` (SFT and validation batches, which come from a
dataset, not the pool): a ``Batch`` in a file.
``save_batch`` writes atomically (temp file, rename), so a trainer never reads a
half-written batch. It does not fsync: a batch file is a message from the driver to
the trainer, deleted after the step, and a run that crashes redoes the step from
the pool and its checkpoint (an fsync cost ~1.5 ms of each step on the 2-core VM).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nexrl.core.pool.rows import PoolRows
from nexrl.core.types.batch import Batch
from nexrl.core.util.files import atomic_write_bytes

__all__ = ["BatchRef", "load_batch", "save_batch"]


@dataclass(frozen=True)
class BatchRef:
    """A step's batch by its place in the pool (module doc)."""

    rows: PoolRows
    pad_token_id: int

    def __len__(self) -> int:
        return len(self.rows)

    def load(self) -> Batch:
        """The padded ``Batch`` of the trajectories, read from the pool now."""
        return Batch.from_columns(self.rows.read(), self.pad_token_id)

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows.to_json(), "pad_token_id": self.pad_token_id}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BatchRef:
        return cls(PoolRows.from_json(doc["rows"]), int(doc["pad_token_id"]))


_FORMAT = "nexrl.batch/2"  # /2: meta pickled into one bytes value


def save_batch(batch: Batch, path: str | Path) -> Path:
    """Write ``batch`` (tensors, meta, pad id) to ``path``; returns the path."""
    buf = io.BytesIO()
    payload = {
        "format": _FORMAT,
        "tensors": {k: v.detach().cpu() for k, v in batch.tensors.items()},
        # pickled apart: torch.save's pickler calls back into Python for every object,
        # ~4x slower on the default recipe's 128 rows of per-row dicts
        "meta": pickle.dumps(batch.meta, protocol=pickle.HIGHEST_PROTOCOL),
        "pad_token_id": batch.pad_token_id,
    }
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue(), fsync=False, fsync_parent=False)
    return Path(path)


def load_batch(path: str | Path | BatchRef) -> Batch:
    """Read a batch written by :func:`save_batch`, or the pool's rows of a ``BatchRef``."""
    if isinstance(path, BatchRef):
        try:
            return path.load()
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(
                f"cannot read the step's {len(path)} trajectories from the pool at "
                f"{path.rows.store!r}: {exc}"
            ) from None
    try:
        payload = torch.load(path, weights_only=False, map_location="cpu")
    except (OSError, RuntimeError, EOFError) as exc:
        raise ValueError(f"cannot read batch file {str(path)!r}: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a batch written by nexrl.trainer.save_batch")
    return Batch(payload["tensors"], pickle.loads(payload["meta"]), payload["pad_token_id"])
