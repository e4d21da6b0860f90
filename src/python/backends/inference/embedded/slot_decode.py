"""A decode step of fixed shape over a preallocated KV cache, replayed as a CUDA graph.

``DecodeBatch`` (generation.py) runs the model's own forward with a growing
``DynamicCache``: every token concatenates new keys onto every layer's cache and
rebuilds the attention mask, and on a GPU each of the few hundred small kernels
of a step is launched from Python. ``SlotDecoder`` keeps one preallocated cache
row per batch row (a *slot*) and runs the decoder layers' own modules in a step
of fixed shape:

* the cache: per layer ``keys``/``values`` ``[slots, kv_heads, width, head_dim]``,
  ``valid [slots, width]`` (the columns a row attends to), and per slot the
  column ``col`` its next token's key goes to, its ``position`` and the token
  ``token`` to feed. A row's prompt is copied in from its prefill (left padding
  and all, so column != position; ``valid`` masks the padding), and each step
  writes one column per row: nothing is concatenated or reallocated;
* a step for ``b`` rows runs on a *bucket* of ``B >= b`` slots (the live rows are
  kept in slots ``0..b-1``; the rest compute rows nobody reads) and the columns
  ``[0, W)`` with ``W`` the live rows' widest column rounded up: on a GPU each
  ``(B, W)`` is captured once as a CUDA graph and replayed, so a step is one
  launch (Nvidia's "CUDA graphs" guide; the technique vLLM and SGLang use for
  decode); on the CPU ``B = b`` and ``W`` is exact, run eagerly;
* the math is the model's: its embedding, norms, projections, MLP and LM head
  modules, its rotary embedding's cos/sin (one table per width), and
  ``softmax(q k^T * scaling + mask) v`` with the query heads grouped over their KV
  heads (``_attend``), so log-probs equal the trainer's forward up to float rounding.

Families whose decoder layer is Llama's (Llama, Mistral, Qwen2, Qwen3 with its q/k
norms) with full attention in every layer are supported (``unsupported``); any other
model is served by ``DecodeBatch``.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)
SUPPORTED_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
_GRAPH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def unsupported(model: Any) -> str | None:
    """Why ``model`` cannot run on a ``SlotDecoder`` (None: it can)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"model_type {kind!r} (supported: {', '.join(sorted(SUPPORTED_TYPES))})"
    layer_types = getattr(cfg, "layer_types", None) or ()
    if any(t != "full_attention" for t in layer_types) or getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention layers"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) in {
        "dynamic",
        "longrope",
    }:
        return f"rope type {rope.get('rope_type', rope.get('type'))!r} (depends on the length)"
    inner = getattr(model, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if getattr(inner, name, None) is None:
            return f"no model.{name}"
    if getattr(model, "lm_head", None) is None:
        return "no lm_head"
    return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """One query per row over its cache: ``softmax(q k^T * scale, masked) v`` with the
    query heads grouped over the KV heads they share (no repeated keys), the softmax in
    float32 as in transformers' eager attention. ``q [B, H, 1, d]``, ``keys``/``values``
    ``[B, KV, w, d]``, ``mask [B, 1, 1, w]`` (True: attend); returns ``[B, H, d]``."""
    B, H, _, d = q.shape
    kv = keys.shape[1]
    scores = torch.matmul(q.view(B, kv, H // kv, d), keys.transpose(-1, -2)) * scale
    scores = scores.float().masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    return torch.matmul(probs, values).view(B, H, d)


def _round_width(width: int) -> int:
    """Cache widths are powers of two from 64."""
    return max(64, 1 << (width - 1).bit_length())


def _bucket(n: int, cap: int) -> int:
    return next((b for b in _GRAPH_BUCKETS if b >= n and b <= cap), cap)


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    logits: torch.Tensor  # its output, [B, V]


class SlotDecoder:
    """The KV cache and the fixed-shape decode step for one architecture (see module doc).

    ``load`` copies prefilled rows into slots; ``decode(b)`` feeds slots ``0..b-1``
    their ``token`` and returns the next logits ``[b, V]`` (float32), advancing each
    slot's column and position; ``compact(keep)`` moves the rows in slots ``keep`` to
    ``0..len(keep)-1``. Graphs are kept per model (its parameters' addresses are in
    them; a reload copies into the same tensors), weakly, and dropped when the cache
    grows.
    """

    def __init__(
        self, model: Any, *, slots: int, width: int, graphs: bool, budget_bytes: int
    ) -> None:
        hf = model.config  # the model's config.json
        attn = model.model.layers[0].self_attn
        self.n_layers = len(model.model.layers)
        self.n_heads = int(hf.num_attention_heads)
        self.n_kv = int(getattr(hf, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.graphs = graphs and self.device.type == "cuda"
        self.budget_bytes = budget_bytes
        self.generation = 0  # bumped when the cache is reallocated (graphs hold its addresses)
        self._models: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self.slots, self.width = 0, 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid = torch.zeros(0, 0, dtype=torch.bool)
        self.state: dict[str, torch.Tensor] = {}
        self._reserve(slots, width)

    # -- the cache ------------------------------------------------------------
    def bytes_for(self, slots: int, width: int) -> int:
        item = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.n_layers * slots * self.n_kv * width * self.head_dim * item

    def fits(self, slots: int, width: int) -> bool:
        """Whether a cache of at least ``slots`` x ``width`` stays within the budget."""
        wide = max(_round_width(width), self.width)
        return self.bytes_for(max(slots, self.slots), wide) <= self.budget_bytes

    def _reserve(self, slots: int, width: int) -> None:
        """Grow the cache to at least ``slots`` x ``width`` (contents kept)."""
        slots, width = max(slots, self.slots), max(width, self.width)
        if (slots, width) == (self.slots, self.width):
            return
        width = _round_width(width)  # (doubling: a few reallocations and recaptures at most)
        shape = (slots, self.n_kv, width, self.head_dim)
        kw = {"device": self.device}
        old = (self.keys + self.values) if self.slots else None
        self.keys = [torch.zeros(shape, dtype=self.dtype, **kw) for _ in range(self.n_layers)]
        self.values = [torch.zeros(shape, dtype=self.dtype, **kw) for _ in range(self.n_layers)]
        valid = torch.zeros((slots, width), dtype=torch.bool, **kw)
        valid[:, 0] = True  # (a free slot attends to one column: no all-masked row, no NaN)
        state = {k: torch.zeros(slots, dtype=torch.long, **kw) for k in ("token", "col", "pos")}
        if old is not None:
            s, w = self.slots, self.width
            for new, prev in zip(self.keys + self.values, old, strict=True):
                new[:s, :, :w] = prev
            valid[:s, :w] = self.valid
            for k, v in state.items():
                v[:s] = self.state[k]
        self.valid, self.state = valid, state
        self.slots, self.width = slots, width
        self.arange = torch.arange(slots, device=self.device)
        self.trues = torch.ones(slots, dtype=torch.bool, device=self.device)  # (no host copy
        # inside a graph: writing a Python True would copy it from the CPU)
        self.generation += 1

    def rope_table(self, model: Any, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's rotary cos/sin ``[width, head_dim]`` for positions ``0..width-1``
        (kept on the model; rebuilt when a wider one is needed)."""
        mine = self._per_model(model)
        cached = mine.get("rope")
        if cached is None or cached[0].shape[0] < width:
            width = max(width, self.width)
            pos = torch.arange(width, device=self.device)[None]
            probe = torch.zeros((1, width, 1), dtype=self.dtype, device=self.device)
            cos, sin = model.model.rotary_emb(probe, pos)
            cached = (cos[0].to(self.dtype).contiguous(), sin[0].to(self.dtype).contiguous())
            mine["rope"] = cached
            mine["graphs"] = {}  # (they read the table replaced)
        return cached

    def _per_model(self, model: Any) -> dict[str, Any]:
        """This decoder's state for ``model`` (its rope table, graphs and graph memory
        pool), dropped with the model; nothing is stored on the model itself (a reload
        deep-copies it)."""
        if model not in self._models:
            self._models[model] = {"graphs": {}}
        return self._models[model]

    # -- rows in and out --------------------------------------------------------
    def load(
        self,
        model: Any,
        slots: torch.Tensor,
        kv: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor,
        last_positions: torch.Tensor,
        tokens: torch.Tensor,
        max_new: int,
    ) -> None:
        """Copy prefilled rows (``kv``: per layer keys and values ``[b, kv_heads, L,
        head_dim]`` from the prefill's cache, ``mask [b, L]``) into the consecutive
        ``slots [b]``; each will feed ``tokens [b]`` at position ``last_positions + 1``
        into column ``L``, ``max_new`` tokens at most."""
        width = mask.shape[1]
        self._reserve(int(slots[-1]) + 1, width + max_new + 1)
        self.rope_table(model, self.width)
        for i, (keys, values) in enumerate(kv):
            self.keys[i][slots, :, :width] = keys.to(self.dtype)
            self.values[i][slots, :, :width] = values.to(self.dtype)
        self.valid[slots] = False
        self.valid[slots, :width] = mask.bool()
        self.state["col"][slots] = width
        self.state["pos"][slots] = last_positions + 1
        self.state["token"][slots] = tokens

    def compact(self, keep: torch.Tensor, live: int) -> None:
        """Move the rows of slots ``keep`` (ascending) to ``0..len(keep)-1``; the slots
        up to ``live`` they leave are reset to free."""
        n = len(keep)
        for t in (*self.keys, *self.values, self.valid, *self.state.values()):
            t[:n] = t.index_select(0, keep)
        self.valid[n:live] = False
        self.valid[n:live, 0] = True
        for v in self.state.values():
            v[n:live] = 0

    def free(self, live: int) -> None:
        """Every row is gone: slots ``0..live-1`` back to free."""
        self.valid[:live] = False
        self.valid[:live, 0] = True
        for v in self.state.values():
            v[:live] = 0

    # -- the step -----------------------------------------------------------------
    def decode(self, model: Any, b: int, width: int) -> torch.Tensor:
        """Feed slots ``0..b-1`` and return their next logits ``[b, V]`` (float32);
        ``width`` > every live row's column."""
        graph = self._graph_or_none(model, b, width) if self.graphs else None
        if graph is not None:
            graph.graph.replay()
            logits = graph.logits[:b].float()
        else:
            logits = self._forward(model, b, min(width, self.width))[:b].float()
        self.state["col"][:b] += 1
        self.state["pos"][:b] += 1
        return logits

    def _graph_or_none(self, model: Any, b: int, width: int) -> _Graph | None:
        """The graph for ``b`` rows under ``width`` columns, captured at first use; None
        (and eager steps from then on, one warning) where capturing fails."""
        w = min(self.width, max(64, 1 << (width - 1).bit_length()))
        try:
            return self._graph(model, _bucket(b, self.slots), w)
        except RuntimeError as exc:
            log.warning("CUDA graphs off for this server: capturing a decode step failed: %s", exc)
            self.graphs = False
            return None

    def _graph(self, model: Any, B: int, w: int) -> _Graph:
        mine = self._per_model(model)
        store: dict[tuple[int, int, int], _Graph] = mine["graphs"]
        key = (self.generation, B, w)
        if key in store:
            return store[key]
        for k in [k for k in store if k[0] != self.generation]:
            del store[k]
        if "pool" not in mine:
            mine["pool"] = torch.cuda.graph_pool_handle()
        pool = mine["pool"]
        # the step twice on a side stream first (lazy initialisation outside the capture);
        # it writes only the columns the replay writes next
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(model, B, w)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # (thread_local: a reload copying weights on another thread meanwhile is no error)
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            logits = self._forward(model, B, w)
        store[key] = _Graph(graph, logits)
        return store[key]

    def _forward(self, model: Any, B: int, w: int) -> torch.Tensor:
        """One token for slots ``0..B-1`` over columns ``0..w-1``: writes each row's
        key and value at its column and marks it valid; returns the logits ``[B, V]``
        in the model's dtype (``decode`` advances the columns and positions)."""
        inner = model.model
        st = self.state
        rows, col, pos = self.arange[:B], st["col"][:B], st["pos"][:B]
        cos_t, sin_t = self.rope_table(model, self.width)
        cos, sin = cos_t[pos][:, None, None, :], sin_t[pos][:, None, None, :]
        self.valid.index_put_((rows, col), self.trues[:B])
        mask = self.valid[:B, None, None, :w]  # [B, 1, 1, w]
        h = inner.embed_tokens(st["token"][:B])[:, None, :]
        for i, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(B, 1, self.n_heads, self.head_dim)
            k = attn.k_proj(x).view(B, 1, self.n_kv, self.head_dim)
            v = attn.v_proj(x).view(B, self.n_kv, self.head_dim)
            if getattr(attn, "q_norm", None) is not None:  # Qwen3
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            self.keys[i][rows, :, col] = k[:, :, 0]
            self.values[i][rows, :, col] = v
            out = _attend(q, self.keys[i][:B, :, :w], self.values[i][:B, :, :w], mask, self.scaling)
            h = h + attn.o_proj(out.reshape(B, 1, self.n_heads * self.head_dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return model.lm_head(inner.norm(h))[:, 0]
