"""Tensor helpers of the trainer step: log-probs from logits, sharding, micro-batches.

Log-probs of the sampled response: with prompt width ``P`` and response width
``R`` (``input_ids = prompts ++ responses``) the logits at position ``P + t - 1``
predict response token ``t``::

    log pi(y_t) = z[P+t-1, y_t] - logsumexp(z[P+t-1, :])     (in float32)

Loss units (what a ``loss_agg_mode`` averages over, see
``nexrl.trainer.algorithms.aggregation``): valid tokens for ``token-mean``, sequences
with at least one valid token for the ``seq-mean-*`` modes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import agg_units, entropy_from_logits

__all__ = [
    "disable_dropout",
    "loss_units",
    "micro_batches",
    "model_inputs",
    "rank_share",
    "response_log_probs",
    "response_valid",
    "shares",
    "unshare",
]


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability in ``model`` to 0; returns how many were not 0.

    Covers ``nn.Dropout`` modules (GPT-2's ``attn_pdrop`` / ``resid_pdrop`` /
    ``embd_pdrop``) and the float ``attention_dropout`` / ``dropout`` attributes that
    Llama- and Qwen2-style attention reads in training mode. The model's config is
    left as it is, so snapshots keep the user's ``config.json``.
    """
    zeroed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            zeroed += module.p > 0
            module.p = 0.0
        for name in ("attention_dropout", "dropout"):
            value = getattr(module, name, None)
            if isinstance(value, float) and not isinstance(value, bool):
                zeroed += value > 0
                setattr(module, name, 0.0)
    return int(zeroed)


def model_inputs(batch: Batch) -> dict[str, Tensor | bool | None]:
    """Keyword arguments of a causal-LM forward over ``prompts ++ responses``.

    A packed batch (``meta["packed"]``, several sequences per row with restarting
    ``position_ids``: ``nexrl.trainer.sft_data``) gets no 2-D attention mask, so the
    model builds a block-diagonal causal mask from the positions.
    """
    packed = bool(batch.meta.get("packed"))
    return {
        "input_ids": batch["input_ids"],
        "attention_mask": None if packed else batch["attention_mask"],
        "position_ids": batch["position_ids"],
        "use_cache": False,
    }


def response_log_probs(
    logits: Tensor, prompt_width: int, responses: Tensor, *, entropy_grad: bool | None = False
) -> tuple[Tensor, Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] | None)`` of ``responses`` under ``logits``.

    ``entropy_grad``: None = no entropy; False = entropy without gradient; True = with.
    """
    if prompt_width < 1:
        raise ValueError("log-probs need at least one prompt token before the response")
    width = responses.shape[1]
    z = logits[:, prompt_width - 1 : prompt_width - 1 + width].float()
    log_probs = z.gather(-1, responses.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)
    entropy = None
    if entropy_grad is not None:
        entropy = entropy_from_logits(z if entropy_grad else z.detach())
    return log_probs, entropy


def response_valid(batch: Batch) -> Tensor:
    """``[B, R]`` bool: real response tokens (attention 1), trained on or not."""
    return batch["attention_mask"][:, batch.prompt_width :].bool()


def loss_units(batch: Batch, mode: str) -> int:
    """Valid tokens (``token-mean``) or non-empty sequences (``seq-mean-*``)."""
    return int(agg_units(batch["response_mask"], mode))


def shares(batch: Batch, world_size: int, *, by_tokens: bool) -> tuple[Batch, Tensor]:
    """``(padded, order)``: ``batch`` padded to a multiple of ``world_size`` rows (copies
    whose ``response_mask`` is 0: they add nothing to any loss), and rank ``r``'s rows
    ``order[r*n : (r+1)*n]`` of it.

    ``by_tokens``: the shares are balanced by real tokens (prompt + response), longest
    row first onto the rank with the fewest tokens that has room (every rank gets
    ``n`` rows; a rank's rows keep their batch order); else contiguous. A rank's results, all-gathered, go back with ``unshare``.
    """
    padded, _ = batch.pad_rows_to_multiple(world_size)
    n = len(padded) // world_size
    if not by_tokens or world_size == 1:
        return padded, torch.arange(len(padded))
    tokens = padded["attention_mask"].sum(1).tolist()
    load = [0] * world_size
    owned: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(tokens)), key=lambda k: (-tokens[k], k)):
        r = min((r for r in range(world_size) if len(owned[r]) < n), key=lambda r: load[r])
        owned[r].append(i)
        load[r] += int(tokens[i])
    return padded, torch.tensor([i for rows in owned for i in sorted(rows)], dtype=torch.int64)


def rank_share(
    batch: Batch, rank: int, world_size: int, *, by_tokens: bool
) -> tuple[Batch, Tensor]:
    """``(rows, order)``: rank ``rank``'s rows of ``batch`` (``shares``) and every rank's
    order, for ``unshare`` of their all-gathered results."""
    padded, order = shares(batch, world_size, by_tokens=by_tokens)
    n = len(padded) // world_size
    return padded[order[rank * n : (rank + 1) * n]], order


def unshare(gathered: Tensor, order: Tensor, rows: int) -> Tensor:
    """Rank-major all-gathered rows (``shares``' order) back in batch order, the
    first ``rows`` (the padding rows dropped)."""
    out = torch.empty_like(gathered)
    out[order] = gathered
    return out[:rows]


def micro_batches(batch: Batch, size: int) -> list[Batch]:
    """Consecutive slices of at most ``size`` rows, each cropped of shared padding."""
    out = []
    for start in range(0, len(batch), size):
        mb = batch[start : start + size]
        out.append(mb.remove_redundant_left_padding().remove_redundant_right_padding())
    return out
