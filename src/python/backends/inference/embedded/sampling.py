"""Per-row sampling: parameters, seeded draws, one step's tokens, what a row records.

Rows (one per prompt x choice) may carry different sampling parameters; each
step samples every row at once (``sample_next``), from draws each row takes from
its own seeded ``torch.Generator`` at the start, so a seeded row samples the same
tokens whatever batch it lands in.

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


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)


def _top_p_mask(scaled: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Top-p (nucleus) on rows of temperature-scaled logits ``[B, V]`` with per-row
    ``top_p`` ``[B]``: a token is dropped when the probability mass of the tokens
    ranked above it already reaches ``top_p`` (so the top token always stays)."""
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(scaled).scatter_(-1, order, sorted_logits)


def sample_next(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    uniform: torch.Tensor,
    mode: LogprobsMode = "raw",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step for every row at once: ``(tokens [B], log-probs [B, V] to
    report)`` from float32 ``logits [B, V]``.

    A row with ``temperature`` <= 0 takes the argmax. The others sample from
    ``softmax(top_p(logits / temperature))`` by inverse transform: the token is the
    first whose cumulative probability exceeds ``uniform`` (the row's own draw in
    [0, 1), from its seeded generator), so a row's token depends only on its own
    logits and seed, never on its batch neighbours."""
    raw = torch.log_softmax(logits, dim=-1)
    greedy = temperature <= 0.0
    tokens = torch.argmax(logits, dim=-1)
    if bool(greedy.all()):
        return tokens, raw
    scaled = logits / torch.where(greedy, 1.0, temperature)[:, None]
    if bool((top_p < 1.0).any()):
        scaled = _top_p_mask(scaled, top_p)
    cdf = torch.cumsum(torch.softmax(scaled, dim=-1), dim=-1)
    target = (uniform * cdf[:, -1]).unsqueeze(-1)
    drawn = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    tokens = torch.where(greedy, tokens, drawn.clamp(max=logits.shape[-1] - 1))
    if mode == "processed":
        processed = torch.log_softmax(scaled, dim=-1)
        return tokens, torch.where(greedy[:, None], raw, processed)
    return tokens, raw


def sample_rows(
    logits: torch.Tensor,
    t: dict[str, torch.Tensor],
    states: list[_RowState],
    tokenizer: Any,
    stop_token_ids: frozenset[int],
    mode: LogprobsMode,
) -> torch.Tensor:
    """Sample every row's next token from ``logits [B, V]`` with its next seeded draw
    (``t``: the batch's ``temperature``, ``top_p``, ``uniform``, ``drawn``; ``drawn``
    advances) and record it in the rows not done yet; returns the tokens ``[B]``."""
    idx = t["drawn"].clamp(max=t["uniform"].shape[1] - 1)
    uniform = t["uniform"].gather(1, idx[:, None]).squeeze(1)
    tokens, lp = sample_next(logits, t["temperature"], t["top_p"], uniform, mode)
    t["drawn"] = t["drawn"] + 1
    chosen = lp.gather(-1, tokens[:, None]).squeeze(-1).tolist()
    for i, (st, token) in enumerate(zip(states, tokens.tolist(), strict=True)):
        if st.done:  # (a finished row riding along until it leaves the batch)
            continue
        _record(st, token, chosen[i], lp[i], tokenizer, stop_token_ids)
    return tokens


class _RowState:
    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.out = SequenceOutput()
        self.done = False
        self.retired = False
        self.owner: Any = None  # the request this row answers (the service sets it)


def _draws(rows: list[tuple[list[int], SamplingParams]], device: torch.device) -> torch.Tensor:
    """``[B, longest max_tokens]`` uniforms: row ``i``'s draws from its own seeded
    generator, one per token it may sample (zeros for greedy rows)."""
    steps = max(p.max_tokens for _, p in rows)
    out = torch.zeros((len(rows), steps), dtype=torch.float32)
    for i, (_, p) in enumerate(rows):
        if p.temperature > 0.0:
            out[i, : p.max_tokens] = torch.rand(p.max_tokens, generator=_generator(p.seed))
    return out.to(device)


def _stop_cut(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _record(
    st: _RowState,
    token: int,
    logprob: float,
    lp: torch.Tensor,
    tokenizer: Any,
    stop_token_ids: frozenset[int],
) -> None:
    o, p = st.out, st.params
    o.token_ids.append(token)
    o.logprobs.append(logprob)
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
