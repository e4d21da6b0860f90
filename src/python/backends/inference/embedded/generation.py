"""Batched sampling for a transformers causal LM: one padded forward loop with KV cache.

Rows (one per prompt x choice) may carry different sampling parameters; each
has its own ``torch.Generator`` so a seeded row samples the same tokens
whatever batch it lands in. Prompts are left-padded; position ids follow the
attention mask, so a row's logits do not depend on its batch neighbours
(up to float rounding).

Returned token ids include the stop token (eos / ``<|im_end|>``) when one
ended the row, like vLLM's ``token_ids``; the text excludes special tokens
and is cut before a matched stop string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

LogprobsMode = Literal["raw", "processed"]


@dataclass(frozen=True)
class SamplingParams:
    """Per-row sampling parameters (already validated)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    ignore_eos: bool = False


@dataclass
class SequenceOutput:
    """One generated choice."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"


def _generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)


def _process(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Temperature + top-p on one row of float32 logits (temperature > 0)."""
    scaled = logits / p.temperature
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass before it already reaches top_p (keeps >= 1).
        drop = (torch.cumsum(probs, dim=-1) - probs) >= p.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        scaled = torch.empty_like(scaled).scatter_(-1, order, sorted_logits)
    return scaled


def _sample_row(
    logits: torch.Tensor, p: SamplingParams, gen: torch.Generator, mode: LogprobsMode
) -> tuple[int, torch.Tensor]:
    """Pick the next token of one row; return it and the log-prob vector to report."""
    raw = torch.log_softmax(logits, dim=-1)
    if p.temperature <= 0.0:
        return int(torch.argmax(logits)), raw
    processed = _process(logits, p)
    probs = torch.softmax(processed, dim=-1)
    token = int(torch.multinomial(probs, 1, generator=gen))
    return token, (torch.log_softmax(processed, dim=-1) if mode == "processed" else raw)


class _RowState:
    def __init__(self, params: SamplingParams, device: torch.device) -> None:
        self.params = params
        self.gen = _generator(params.seed, device)
        self.out = SequenceOutput()
        self.done = False


def _stop_cut(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


@torch.inference_mode()
def generate(
    model: Any,
    tokenizer: Any,
    rows: list[tuple[list[int], SamplingParams]],
    *,
    stop_token_ids: frozenset[int],
    pad_token_id: int,
    logprobs_mode: LogprobsMode = "raw",
) -> list[SequenceOutput]:
    """Generate every row together; returns one ``SequenceOutput`` per row."""
    if not rows:
        return []
    device = next(model.parameters()).device
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, _) in enumerate(rows):
        input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    states = [_RowState(p, device) for _, p in rows]

    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past = out.past_key_values
    while True:
        logits = out.logits[:, -1, :].float()
        next_tokens = []
        for i, st in enumerate(states):
            if st.done:
                next_tokens.append(pad_token_id)
                continue
            token, lp = _sample_row(logits[i], st.params, st.gen, logprobs_mode)
            _record(st, token, lp, tokenizer, stop_token_ids)
            next_tokens.append(token)
        if all(st.done for st in states):
            break
        feed = torch.tensor(next_tokens, dtype=torch.long, device=device).unsqueeze(-1)
        mask = torch.cat([mask, torch.ones_like(feed)], dim=-1)
        positions = positions[:, -1:] + 1
        out = model(
            input_ids=feed,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
    for st in states:
        _finalize_text(st, tokenizer)
    return [st.out for st in states]


def _record(
    st: _RowState, token: int, lp: torch.Tensor, tokenizer: Any, stop_token_ids: frozenset[int]
) -> None:
    o, p = st.out, st.params
    o.token_ids.append(token)
    o.logprobs.append(float(lp[token]))
    if p.top_logprobs > 0:
        vals, idx = torch.topk(lp, k=min(p.top_logprobs, lp.shape[-1]))
        o.top_logprobs.append([(int(t), float(v)) for v, t in zip(vals, idx, strict=True)])
    eos = token in stop_token_ids and not p.ignore_eos
    if eos or (p.stop and _stop_cut(_decode(tokenizer, o.token_ids), p.stop) is not None):
        st.done, o.finish_reason = True, "stop"
    elif len(o.token_ids) >= p.max_tokens:
        st.done, o.finish_reason = True, "length"


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=True))


def _finalize_text(st: _RowState, tokenizer: Any) -> None:
    text = _decode(tokenizer, st.out.token_ids)
    cut = _stop_cut(text, st.params.stop) if st.params.stop else None
    st.out.text = text if cut is None else text[:cut]
