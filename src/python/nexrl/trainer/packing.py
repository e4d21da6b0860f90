"""Packed forwards: a micro-batch's sequences concatenated into one row, no padding.

A micro-batch in the trainer's layout is ``[b, P + R]`` (prompts left-padded to
``P``, responses right-padded to ``R``, ``attention_mask`` 1 on real tokens). Its
packed forward runs the model once on the real tokens only::

    row      = s_0 ++ s_1 ++ ... ++ s_{b-1}       s_i = the real tokens of row i
    position = the rows' own position_ids at those tokens (restarting per sequence)

with no 2-D attention mask: Hugging Face models build a block-diagonal causal mask
from the restarting positions (``find_packed_sequence_indices``), the layout
``data.sft_packing`` uses, so no token attends to another sequence. Response token
``t`` of row ``i`` (``p_i`` real prompt tokens, starting at ``o_i`` in the packed
row) is predicted by the logits at ``o_i + p_i + t - 1``::

    log pi(y_t) = z[j, y_t] - logsumexp(z[j, :])     j = o_i + p_i + t - 1 (float32)

computed for the packed positions only (never a ``[b, R, V]`` tensor), then put
back in the ``[b, R]`` layout (0 where there is no response token), so the loss,
every ``loss_agg_mode``, the KL and the entropy bonus read what the padded
forward gives (``tests/unit/trainer/test_packing.py``: equal within float32
rounding, and so are the gradients). The padding's compute and the logits of
padded positions (``b * (P + R) - tokens`` of them) are what is saved.

Models whose attention does not follow restarting positions would attend across
sequences: ``packing_works`` checks a model once (two sequences packed and alone)
before the trainer uses it (``trainer.packing``). Hugging Face finds the packed
sequences only without a KV cache: every forward here passes ``use_cache=False``.

Same idea as verl's ``use_remove_padding``, OpenRLHF's ``--packing_samples`` and
AReaL's 1-D packing; the gather/scatter here is this module's own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import entropy_from_logits

__all__ = ["Packed", "pack", "packed_response_log_probs", "packed_response_values", "packing_works"]


class Packed:
    """Where a micro-batch's tokens go in its packed row (see the module doc)."""

    def __init__(self, batch: Batch) -> None:
        valid = batch["attention_mask"].bool()
        self.rows, width = valid.shape
        self.prompt_width = batch.prompt_width
        self.input_ids = batch["input_ids"][valid].unsqueeze(0)  # [1, T], row by row
        self.position_ids = batch["position_ids"][valid].unsqueeze(0)
        lengths = valid.sum(1)
        starts = torch.cumsum(lengths, 0) - lengths  # o_i
        prompt_lengths = valid[:, : self.prompt_width].sum(1)  # p_i
        self.response_valid = valid[:, self.prompt_width :]  # [b, R]
        steps = torch.arange(width - self.prompt_width, device=valid.device)
        source = (starts + prompt_lengths - 1).unsqueeze(1) + steps  # j for every (i, t)
        self.source = torch.where(self.response_valid, source, 0)  # [b, R] into [T]
        self.tokens = int(lengths.sum())


def pack(batch: Batch) -> Packed:
    """The packed layout of ``batch`` (its rows must each have a prompt token)."""
    if bool((batch["attention_mask"][:, : batch.prompt_width].sum(1) < 1).any()):
        raise ValueError("packing needs at least one prompt token in every row")
    return Packed(batch)


def packed_response_log_probs(
    forward: Callable[..., object],
    batch: Batch,
    *,
    entropy_grad: bool | None = False,
) -> tuple[Tensor, Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] | None)`` of ``batch``'s responses from one
    packed forward (``forward(**inputs)`` returns an object with ``.logits``); 0 where
    there is no response token. ``entropy_grad`` as in ``ops.response_log_probs``."""
    p = pack(batch)
    out = forward(
        input_ids=p.input_ids, position_ids=p.position_ids, attention_mask=None, use_cache=False
    )
    z = out.logits[0].float()  # type: ignore[attr-defined]  # [T, V]
    targets = torch.roll(p.input_ids[0], -1)  # the next token of every packed position
    flat = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)
    log_probs = torch.where(p.response_valid, flat[p.source], 0.0)
    entropy = None
    if entropy_grad is not None:
        h = entropy_from_logits(z if entropy_grad else z.detach())
        entropy = torch.where(p.response_valid, h[p.source], 0.0)
    return log_probs, entropy


def packed_response_values(forward: Callable[..., object], batch: Batch) -> Tensor:
    """``[b, R]`` values of ``batch``'s responses from one packed forward of a value
    model (``.logits[..., 0]``, the head's one output): ``values[i, t]`` is the output
    at ``j = o_i + p_i + t - 1``, the state before token ``t`` (as the padded
    ``Critic`` reads position ``P + t - 1``); 0 where there is no response token."""
    p = pack(batch)
    out = forward(
        input_ids=p.input_ids, position_ids=p.position_ids, attention_mask=None, use_cache=False
    )
    scores = out.logits[0, :, 0].float()  # type: ignore[attr-defined]  # [T]
    return torch.where(p.response_valid, scores[p.source], 0.0)


@torch.no_grad()
def packing_works(model: torch.nn.Module, vocab_size: int, device: torch.device) -> bool:
    """Whether ``model`` keeps packed sequences apart: the logits of two sequences
    packed into one row equal their logits alone (float32 tolerance)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(1, vocab_size, (1, 5), generator=g).to(device)
    b = torch.randint(1, vocab_size, (1, 7), generator=g).to(device)
    was_training = model.training
    model.eval()
    try:
        alone = [
            model(
                input_ids=s,
                position_ids=torch.arange(s.shape[1], device=device)[None],
                use_cache=False,
            ).logits
            for s in (a, b)
        ]
        positions = torch.cat([torch.arange(5), torch.arange(7)]).to(device)[None]
        packed = model(
            input_ids=torch.cat([a, b], 1),
            position_ids=positions,
            attention_mask=None,
            use_cache=False,
        ).logits
    finally:
        model.train(was_training)
    return bool(torch.allclose(packed, torch.cat(alone, 1), atol=1e-4, rtol=1e-4))
