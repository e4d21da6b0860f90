"""Continuous batching on a ``SlotDecoder``: ``DecodeBatch``'s interface, fixed-shape steps.

Rows are prefilled by the model's own forward (the prompts left-padded among
themselves, a prompt shared by a request's ``n`` choices prefilled once), their
first tokens sampled, and their caches copied into free slots; each ``step`` then
runs the decoder's fixed-shape step (a CUDA graph replay on a GPU) for every row
and samples the next tokens on the device with the rows' own seeded draws
(``sample_next``), so a seeded row samples the same tokens in any batch. Finished
rows leave at ``retire`` and the rest move down to the low slots.
"""

from __future__ import annotations

from typing import Any

import torch

from backends.inference.embedded.generation import _pad_right, prefill
from backends.inference.embedded.sampling import (
    LogprobsMode,
    SamplingParams,
    _draws,
    _finalize_text,
    _RowState,
    sample_rows,
)
from backends.inference.embedded.slot_decode import SlotDecoder

Row = tuple[list[int], SamplingParams]


class SlotBatch:
    """Rows generating together on ``decoder`` (see the module doc)."""

    joinable = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        decoder: SlotDecoder,
        *,
        stop_token_ids: frozenset[int],
        pad_token_id: int,
        logprobs_mode: LogprobsMode = "raw",
    ) -> None:
        self.model, self.tokenizer, self.decoder = model, tokenizer, decoder
        self.stop_token_ids, self.pad_token_id = stop_token_ids, pad_token_id
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.device = decoder.device
        self.rows: list[_RowState] = []
        self._ends: list[int] = []  # per row: its last column + 1 (the widest bounds a step)
        self._t: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def fits(self, rows: list[Row]) -> bool:
        """Whether ``rows`` fit beside the running rows within the cache's budget."""
        width = max(len(ids) for ids, _ in rows) + max(p.max_tokens for _, p in rows) + 1
        return self.decoder.fits(len(self.rows) + len(rows), width)

    @torch.inference_mode()
    def add(self, rows: list[Row]) -> None:
        """Prefill ``rows``, sample their first tokens; they take the next free slots."""
        if not rows:
            return
        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(ids), len(first)) for ids, _ in rows]
        logits, cache, mask, positions = prefill(
            self.model, list(first), self.pad_token_id, self.device
        )
        index = torch.tensor(which, dtype=torch.long, device=self.device)
        new = {
            "temperature": torch.tensor([p.temperature for _, p in rows], device=self.device),
            "top_p": torch.tensor([p.top_p for _, p in rows], device=self.device),
            "uniform": _draws(rows, self.device),
            "drawn": torch.zeros(len(rows), dtype=torch.long, device=self.device),
        }
        states = [_RowState(p) for _, p in rows]
        tokens = self._sample(logits.float()[index], new, states)
        start = len(self.rows)
        slots = torch.arange(start, start + len(rows), device=self.device)
        max_new = max(p.max_tokens for _, p in rows)

        kv = [(layer.keys[index], layer.values[index]) for layer in cache.layers]
        self.decoder.load(self.model, slots, kv, mask[index], positions[index, -1], tokens, max_new)
        width = mask.shape[1]
        self._ends += [width + 1] * len(rows)
        self._merge(new)
        self.rows += states

    def _merge(self, new: dict[str, torch.Tensor]) -> None:
        if not self._t:
            self._t = new
            return
        draws = max(self._t["uniform"].shape[1], new["uniform"].shape[1])
        merged = {}
        for k, a in self._t.items():
            b = new[k]
            if k == "uniform":
                a, b = _pad_right(a, draws), _pad_right(b, draws)
            merged[k] = torch.cat([a, b])
        self._t = merged

    @torch.inference_mode()
    def step(self) -> None:
        """Every row feeds its last token; sample the next."""
        n = len(self.rows)
        logits = self.decoder.decode(self.model, n, max(self._ends))
        self._ends = [e + 1 for e in self._ends]
        tokens = self._sample(logits, self._t, self.rows)
        self.decoder.state["token"][:n] = tokens

    def _sample(
        self, logits: torch.Tensor, t: dict[str, torch.Tensor], states: list[_RowState]
    ) -> torch.Tensor:
        return sample_rows(
            logits, t, states, self.tokenizer, self.stop_token_ids, self.logprobs_mode
        )

    @torch.inference_mode()
    def retire(self) -> list[_RowState]:
        """Take the finished rows out; returns them, text finalised. The rest move to
        the low slots."""
        done = [st for st in self.rows if st.done and not st.retired]
        if not done:
            return done
        for st in done:
            st.retired = True
            _finalize_text(st, self.tokenizer)
        live = len(self.rows)
        keep = [i for i, st in enumerate(self.rows) if not st.done]
        if not keep:
            self.decoder.free(live)
            self.rows, self._ends, self._t = [], [], {}
            return done
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.decoder.compact(idx, live)
        self.rows = [self.rows[i] for i in keep]
        self._ends = [self._ends[i] for i in keep]
        self._t = {k: v.index_select(0, idx) for k, v in self._t.items()}
        return done
