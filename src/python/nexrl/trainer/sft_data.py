"""SFT from a dataset: conversations -> token ids + assistant mask -> trainer ``Batch``.

Rows are JSON lines of OpenAI-style conversations (``{"messages": [...],
"tools": [...]}``, the warm start's format, checked by the same code: a bad row
stops with ``<field>: <file>:<line>: <what>``). Each is rendered with the
model's chat template; the label mask is 1 on the assistant turns' tokens only
(``nexrl.driver.modeling.warm_start.encode_demo``: from after the generation prompt up
to and including the turn's stop token).

A conversation ``ids[0..n)`` with mask ``m`` goes into the trainer's layout as a
one-token prompt ``ids[0]`` and the response ``ids[1..n)`` with
``response_mask = m[1..n)`` (``ids[0]`` is template text, never trained on), so
the trainer's loss ``agg(-log pi(ids[t] | ids[<t]), response_mask)`` is the
cross-entropy on the assistant tokens.

Two layouts (``data.sft_packing``):

* padding (false): one conversation per row, right-padded to the longest;
* packing (true): the step's conversations are concatenated, in order, into
  rows of at most ``data.sft_max_length`` tokens (first fit). ``position_ids``
  restart at 0 for each conversation and the batch carries ``meta["packed"]``:
  the forward then passes no 2-D attention mask, and Hugging Face models build
  a block-diagonal causal mask from the restarting positions
  (``find_packed_sequence_indices``), so no token attends to another
  conversation. The row's trailing padding is one more segment, never trained.
  The log-probs are those of the padded layout (a test checks it).

Either way a step trains the same ``data.sft_batch_size`` conversations; only
the padding differs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nexrl.core.conversations import encode_demo, load_demos
from nexrl.core.data.errors import DataError
from nexrl.core.types.batch import Batch

__all__ = ["Encoded", "SftDataError", "SftDataset", "encode_files", "last_turn", "sft_batch"]

logger = logging.getLogger(__name__)

Encoded = tuple[list[int], list[int]]  # (token ids, label mask: 1 on assistant tokens)


class SftDataError(DataError, ValueError):
    """The SFT dataset cannot be used (the message names the field and file)."""


def encode_files(
    tok: Any, files: Sequence[str | Path], field: str, max_length: int, stop_ids: Sequence[int]
) -> list[Encoded]:
    """Every conversation of ``files`` encoded; longer than ``max_length`` tokens are dropped
    (counted in the log); an error when none is left."""
    demos = load_demos(files, field)
    out: list[Encoded] = []
    for demo in demos:
        ids, mask = encode_demo(tok, demo, stop_ids)
        if len(ids) > max_length or len(ids) < 2:
            continue
        mask[0] = 0  # the one-token prompt is never a label
        out.append((ids, mask))
    if len(out) < len(demos):
        logger.warning(
            "%s: %d of %d conversations are longer than data.sft_max_length=%d tokens: dropped",
            field,
            len(demos) - len(out),
            len(demos),
            max_length,
        )
    if not out:
        raise SftDataError(
            f"{field}: every conversation is longer than data.sft_max_length={max_length} "
            "tokens; raise data.sft_max_length"
        )
    return out


def last_turn(example: Encoded) -> tuple[list[int], list[int]]:
    """``(prompt, answer)`` of an encoded conversation: the tokens before its last
    assistant turn, and that turn's label tokens (its stop token included)."""
    ids, mask = example
    end = max(i for i, m in enumerate(mask) if m) + 1
    start = end
    while start > 0 and mask[start - 1]:
        start -= 1
    return list(ids[:start]), list(ids[start:end])


def _pack(examples: Sequence[Encoded], max_length: int) -> list[list[int]]:
    """First fit, in order: the example indices of each row."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i, (ids, _) in enumerate(examples):
        for r, free in enumerate(room):
            if len(ids) <= free:
                rows[r].append(i)
                room[r] -= len(ids)
                break
        else:
            rows.append([i])
            room.append(max_length - len(ids))
    return rows


def sft_batch(
    examples: Sequence[Encoded], pad_token_id: int, *, packing: bool, max_length: int
) -> Batch:
    """The trainer ``Batch`` of ``examples`` (see the module doc for both layouts)."""
    if not examples:
        raise SftDataError("sft_batch: no conversations to batch")
    groups = _pack(examples, max_length) if packing else [[i] for i in range(len(examples))]
    rows: list[tuple[list[int], list[int], list[int]]] = []  # ids, mask, positions
    for group in groups:
        ids: list[int] = []
        mask: list[int] = []
        pos: list[int] = []
        for i in group:
            e_ids, e_mask = examples[i]
            ids += e_ids
            mask += e_mask
            pos += list(range(len(e_ids)))
        rows.append((ids, mask, pos))
    b, width = len(rows), max(len(r[0]) for r in rows)
    input_ids = torch.full((b, width), pad_token_id, dtype=torch.int64)
    attention = torch.zeros((b, width), dtype=torch.int64)
    labels = torch.zeros((b, width), dtype=torch.int64)
    positions = torch.zeros((b, width), dtype=torch.int64)
    for r, (ids, mask, pos) in enumerate(rows):
        n = len(ids)
        input_ids[r, :n] = torch.tensor(ids)
        attention[r, :n] = 1
        labels[r, :n] = torch.tensor(mask)
        positions[r, :n] = torch.tensor(pos)
        # padding: its own segment when packed (positions restart), else continuing
        positions[r, n:] = torch.arange(width - n) if packing else n - 1
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": positions,
        "prompts": input_ids[:, :1].clone(),
        "responses": input_ids[:, 1:].clone(),
        "response_mask": labels[:, 1:].clone(),
    }
    meta: dict[str, Any] = {"packed": bool(packing), "sft_examples": len(examples)}
    return Batch(tensors, meta, pad_token_id)


@dataclass
class SftDataset:
    """Encoded conversations handed out ``batch_size`` at a time in a per-epoch order
    seeded by ``(seed, epoch)``; the position ``(epoch, cursor)`` is the whole state."""

    examples: list[Encoded]
    batch_size: int
    seed: int = 0
    shuffle: bool = True
    epoch: int = 0
    cursor: int = 0

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.examples)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def next_examples(self) -> list[Encoded]:
        """The next ``batch_size`` conversations (an epoch's tail is followed by the
        next epoch's head: every step is full)."""
        out: list[Encoded] = []
        while len(out) < self.batch_size:
            if self.cursor >= len(self.examples):
                self.epoch, self.cursor = self.epoch + 1, 0
            order = self._order(self.epoch)
            take = min(self.batch_size - len(out), len(order) - self.cursor)
            out += [self.examples[int(i)] for i in order[self.cursor : self.cursor + take]]
            self.cursor += take
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor, "size": len(self.examples)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state.get("size", len(self.examples))) != len(self.examples):
            raise SftDataError(
                f"data.data_files: the checkpoint was written for {state['size']} "
                f"conversations, the files now hold {len(self.examples)}; resume with the "
                "same data or resume.mode=disable"
            )
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
