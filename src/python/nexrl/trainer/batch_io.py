"""A ``Batch`` in a file: how a batch can reach trainer actors by path instead of by value.

``save_batch`` writes atomically (temp file, fsync, rename), so a trainer never
reads a half-written batch.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from nexrl.types.batch import Batch
from nexrl.util.files import atomic_write_bytes

__all__ = ["load_batch", "save_batch"]

_FORMAT = "nexrl.batch/1"


def save_batch(batch: Batch, path: str | Path) -> Path:
    """Write ``batch`` (tensors, meta, pad id) to ``path``; returns the path."""
    buf = io.BytesIO()
    payload = {
        "format": _FORMAT,
        "tensors": {k: v.detach().cpu() for k, v in batch.tensors.items()},
        "meta": batch.meta,
        "pad_token_id": batch.pad_token_id,
    }
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def load_batch(path: str | Path) -> Batch:
    """Read a batch written by :func:`save_batch`."""
    try:
        payload = torch.load(path, weights_only=False, map_location="cpu")
    except (OSError, RuntimeError, EOFError) as exc:
        raise ValueError(f"cannot read batch file {str(path)!r}: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a batch written by nexrl.trainer.save_batch")
    return Batch(payload["tensors"], payload["meta"], payload["pad_token_id"])
