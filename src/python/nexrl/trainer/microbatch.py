"""Which rows of a rank's shard go into each micro-batch: by rows or by a token budget.

``trainer.max_tokens_per_micro_batch`` null: consecutive slices of
``trainer.micro_batch_size`` rows (as always). Set: rows binned by their real
tokens (prompt + response), longest first, each into the first micro-batch with
room for it (first-fit decreasing), so that few micro-batches are needed and a
long sequence does not pad short ones; a row longer than the budget gets one of
its own. verl's dynamic batch size (``ppo_max_token_len_per_gpu``) is the same idea.

Every rank runs the same number of micro-batches (a data-parallel backward is
collective): a rank with fewer adds fillers, one row whose ``response_mask`` is 0,
which adds nothing to the loss or the gradient. The update stays that of the whole
global batch whatever the split: each micro-batch's loss is weighted by its share
of the global batch's loss units (``nexrl.trainer.update``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch

__all__ = ["MicroBatch", "micro_batch", "plan_micro_batches", "rank_plan", "token_bins"]


@dataclass(frozen=True)
class MicroBatch:
    """Rows ``rows`` of the shard (a filler when ``filler``: nothing to train or record)."""

    rows: Tensor
    filler: bool = False


def token_bins(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """First-fit decreasing: row indices per bin, each bin's total at most ``max_tokens``
    (a row longer than that alone); rows in a bin in their original order."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(max_tokens - n)
    return [sorted(b) for b in bins]


def plan_micro_batches(
    shard: Batch, micro_batch_size: int, max_tokens: int | None, count: int | None = None
) -> list[MicroBatch]:
    """The shard's micro-batches (module doc), padded with fillers to ``count`` when given."""
    n = len(shard)
    if max_tokens is None:
        plan = [
            MicroBatch(torch.arange(s, min(s + micro_batch_size, n)))
            for s in range(0, n, micro_batch_size)
        ]
    else:
        lengths = shard["attention_mask"].sum(1).tolist()
        plan = [
            MicroBatch(torch.tensor(b, dtype=torch.int64))
            for b in token_bins([int(x) for x in lengths], max_tokens)
        ]
    while count is not None and len(plan) < count:
        plan.append(MicroBatch(torch.zeros(1, dtype=torch.int64), filler=True))
    return plan


def rank_plan(
    engine: Any,
    shard: Batch,
    micro_batch_size: int,
    max_tokens: int | None,
    *,
    equal_across_ranks: bool,
) -> list[MicroBatch]:
    """A rank's micro-batches of its ``shard``; with ``equal_across_ranks`` as many on
    every rank of ``engine`` (fillers), as a backward needs (a collective: every rank
    calls it)."""
    plan = plan_micro_batches(shard, micro_batch_size, max_tokens)
    if equal_across_ranks and max_tokens is not None and engine.world_size > 1:
        counts = torch.zeros(engine.world_size, dtype=torch.float64)
        counts[engine.rank] = len(plan)
        most = int(engine.all_reduce_sum(counts).max())
        plan = plan_micro_batches(shard, micro_batch_size, max_tokens, count=most)
    return plan


def micro_batch(shard: Batch, mb: MicroBatch) -> Batch:
    """The rows of ``mb`` cropped of shared padding; a filler's mask zeroed."""
    out = shard[mb.rows].remove_redundant_left_padding().remove_redundant_right_padding()
    if mb.filler:
        out["response_mask"] = torch.zeros_like(out["response_mask"])
    return out
