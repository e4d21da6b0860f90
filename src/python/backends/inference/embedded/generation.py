"""Batched decoding for a transformers causal LM: one padded forward loop with KV cache.

Prompts are left-padded; position ids follow the attention mask, so a row's
logits do not depend on its batch neighbours (up to float rounding). Rows join
and leave a running batch between steps (``DecodeBatch``). How each row's next
token is chosen and recorded is ``sampling.py``'s.
"""

from __future__ import annotations

from typing import Any

import torch

from backends.inference.embedded.sampling import (
    LogprobsMode,
    SamplingParams,
    SequenceOutput,
    _draws,
    _finalize_text,
    _RowState,
    sample_rows,
)


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``t`` zero-padded on the left of ``dim`` to ``width``."""
    short = width - t.shape[dim]
    if short <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = short
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _pad_right(t: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t


def _joinable(cache: Any) -> bool:
    """Whether rows may join or leave ``cache`` between steps: a transformers
    ``DynamicCache`` of plain (full-attention) layers, whose keys and values are
    ``[B, heads, L, dim]`` tensors."""
    layers: Any = getattr(cache, "layers", None) or ()
    return bool(layers) and all(
        type(layer).__name__ == "DynamicLayer" and getattr(layer, "keys", None) is not None
        for layer in layers
    )


def prefill(
    model: Any, prompts: list[Any], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """One forward of ``model`` over the left-padded ``prompts`` (token id lists):
    ``(last logits [b, V], KV cache, mask [b, width], position ids [b, width])``;
    positions follow the mask, so padding changes no row's logits."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, ids in enumerate(prompts):
        input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    return out.logits[:, -1, :], out.past_key_values, mask, positions


class DecodeBatch:
    """Rows generating together, one decoding step at a time (continuous batching).

    ``add`` prefills new rows (left-padded among themselves) and samples their first
    token; they join the running rows at the next ``step``: the two KV caches and
    attention masks are left-padded to one length and stacked, so each row keeps its
    own positions and attends to its own tokens only. ``retire`` takes finished rows
    out (and drops cache columns no row attends to any more). A model whose cache
    is not a plain ``DynamicCache`` (``joinable`` False) takes new rows only when
    the batch is empty.

    Every state tensor has one row per entry of ``rows``:
    ``mask [B, L]`` (the cache's columns), ``positions [B, 1]`` (of the next token
    fed), ``feed [B]`` (the last sampled token, not yet in the cache),
    ``drawn [B]`` (tokens sampled), ``uniform [B, T]`` (the rows' seeded draws).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        stop_token_ids: frozenset[int],
        pad_token_id: int,
        logprobs_mode: LogprobsMode = "raw",
        share_prefill: bool = True,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.share_prefill = share_prefill
        self.stop_token_ids, self.pad_token_id = stop_token_ids, pad_token_id
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.device = next(model.parameters()).device
        self.rows: list[_RowState] = []
        self.cache: Any = None
        self.joinable = True
        self._t: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.rows)

    @torch.inference_mode()
    def add(self, rows: list[tuple[list[int], SamplingParams]]) -> None:
        """Prefill ``rows`` and sample their first tokens; they join the batch."""
        if not rows:
            return
        if self.rows and not self.joinable:
            raise RuntimeError("this model's cache cannot take rows into a running batch")
        # rows sharing a prompt (a request's n choices) share its prefill: each distinct
        # prompt runs once, then its logits, cache rows and mask are repeated per row
        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(ids), len(first)) for ids, _ in rows]
        shared = self.share_prefill and len(first) < len(rows)
        logits, cache, mask, positions = self._prefill(
            list(first) if shared else [ids for ids, _ in rows]
        )
        if shared:
            if _joinable(cache):
                index = torch.tensor(which, dtype=torch.long, device=self.device)
                logits, mask, positions = logits[index], mask[index], positions[index]
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[index], layer.values[index]
            else:  # a cache we cannot index: prefill every row
                logits, cache, mask, positions = self._prefill([ids for ids, _ in rows])
        self._join(rows, logits, cache, mask, positions)

    def _prefill(self, prompts: list[Any]) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        return prefill(self.model, prompts, self.pad_token_id, self.device)

    def _join(
        self,
        rows: list[tuple[list[int], SamplingParams]],
        logits: torch.Tensor,
        cache: Any,
        mask: torch.Tensor,
        positions: torch.Tensor,
    ) -> None:
        """Sample the prefilled rows' first tokens; they become the batch or join it."""
        device = self.device
        new = {
            "mask": mask,
            "positions": positions[:, -1:] + 1,
            "temperature": torch.tensor([p.temperature for _, p in rows], device=device),
            "top_p": torch.tensor([p.top_p for _, p in rows], device=device),
            "uniform": _draws(rows, device),
            "drawn": torch.zeros(len(rows), dtype=torch.long, device=device),
        }
        states = [_RowState(p) for _, p in rows]
        new["feed"] = self._sample(logits.float(), new, states)
        if not self.rows:
            self.rows, self.cache, self._t = states, cache, new
            self.joinable = _joinable(cache)
            return
        self._merge(states, cache, new)

    def _merge(self, states: list[_RowState], cache: Any, new: dict[str, torch.Tensor]) -> None:
        old = self._t
        width = max(old["mask"].shape[1], new["mask"].shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            mine.keys = torch.cat(
                [_pad_left(mine.keys, width, 2), _pad_left(theirs.keys, width, 2)]
            )
            mine.values = torch.cat(
                [_pad_left(mine.values, width, 2), _pad_left(theirs.values, width, 2)]
            )
        draws = max(old["uniform"].shape[1], new["uniform"].shape[1])
        merged = {}
        for k in old:
            a, b = old[k], new[k]
            if k == "mask":
                a, b = _pad_left(a, width, 1), _pad_left(b, width, 1)
            elif k == "uniform":
                a, b = _pad_right(a, draws), _pad_right(b, draws)
            merged[k] = torch.cat([a, b])
        self._t = merged
        self.rows = self.rows + states

    @torch.inference_mode()
    def step(self) -> None:
        """Feed every row its last token and sample the next."""
        t = self._t
        t["mask"] = torch.cat([t["mask"], torch.ones_like(t["feed"])[:, None]], dim=-1)
        out = self.model(
            input_ids=t["feed"][:, None],
            attention_mask=t["mask"],
            position_ids=t["positions"],
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = out.past_key_values
        t["positions"] = t["positions"] + 1
        t["feed"] = self._sample(out.logits[:, -1, :].float(), t, self.rows)

    def _sample(
        self, logits: torch.Tensor, t: dict[str, torch.Tensor], states: list[_RowState]
    ) -> torch.Tensor:
        return sample_rows(
            logits, t, states, self.tokenizer, self.stop_token_ids, self.logprobs_mode
        )

    def retire(self) -> list[_RowState]:
        """Take the finished rows out of the batch; returns them, text finalised."""
        done = [st for st in self.rows if st.done and not st.retired]
        for st in done:
            st.retired = True
            _finalize_text(st, self.tokenizer)
        if all(st.done for st in self.rows):
            self.rows, self.cache, self._t = [], None, {}
            return done
        if not done or not self.joinable:
            return done  # (finished rows ride along, fed their last token, until all are done)
        keep = [i for i, st in enumerate(self.rows) if not st.done]
        self.rows = [self.rows[i] for i in keep]
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        t = {k: v.index_select(0, idx) for k, v in self._t.items()}
        used = t["mask"].any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0  # columns no remaining row attends to
        t["mask"] = t["mask"][:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, idx)[:, :, first:]
            layer.values = layer.values.index_select(0, idx)[:, :, first:]
        self._t = t
        return done


@torch.inference_mode()
def generate(
    model: Any,
    tokenizer: Any,
    rows: list[tuple[list[int], SamplingParams]],
    *,
    stop_token_ids: frozenset[int],
    pad_token_id: int,
    logprobs_mode: LogprobsMode = "raw",
    share_prefill: bool = True,
) -> list[SequenceOutput]:
    """Generate every row together; returns one ``SequenceOutput`` per row
    (``share_prefill``: rows with one prompt prefill it once, ``DecodeBatch.add``)."""
    if not rows:
        return []
    batch = DecodeBatch(
        model,
        tokenizer,
        stop_token_ids=stop_token_ids,
        pad_token_id=pad_token_id,
        logprobs_mode=logprobs_mode,
        share_prefill=share_prefill,
    )
    return run_batch(batch, rows)


def run_batch(batch: Any, rows: list[tuple[list[int], SamplingParams]]) -> list[SequenceOutput]:
    """Add ``rows`` to an empty ``batch`` (a ``DecodeBatch`` or a ``SlotBatch``) and
    step it until every row is done; one ``SequenceOutput`` per row."""
    if not rows:
        return []
    batch.add(rows)
    states = list(batch.rows)
    batch.retire()
    while len(batch):
        batch.step()
        batch.retire()
    return [st.out for st in states]
