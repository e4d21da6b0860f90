"""The metrics a step reports about its batch, and its timings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.ops import response_valid

__all__ = ["input_metrics", "stats", "timed"]


def input_metrics(batch: Batch) -> dict[str, float]:
    """Stats of the batch as received (size, rewards, lengths, groups)."""
    m: dict[str, float] = {"batch/size": float(len(batch))}
    if len(batch) == 0:
        return m
    if "rewards" in batch:
        m.update(stats("critic/rewards", batch["rewards"].float()))
    if "attention_mask" in batch and "responses" in batch:
        m.update(stats("response_length", response_valid(batch).sum(-1).float()))
        prompt = batch["attention_mask"][:, : batch.prompt_width].sum(-1).float()
        m["prompt_length/mean"] = float(prompt.mean())
    if "group_ids" in batch:
        m["batch/num_groups"] = float(torch.unique(batch["group_ids"]).numel())
    return m


def stats(prefix: str, values: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """``{prefix}/mean``, ``/max``, ``/min`` of ``values`` (where ``mask``)."""
    v = values.detach().float()
    if mask is not None:
        v = v[mask.bool()]
    if v.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": float(v.mean()),
        f"{prefix}/max": float(v.max()),
        f"{prefix}/min": float(v.min()),
    }


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's wall time to ``timings[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
