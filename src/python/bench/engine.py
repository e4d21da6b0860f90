"""The generation engine alone, side by side: tokens/s of the embedded server's decode
loops against Hugging Face ``generate`` and transformers' continuous batching.

One workload for every side: ``prompts`` chat prompts of the default task, ``n``
sampled answers each (temperature 1), exactly ``tokens`` new tokens per answer
(``ignore_eos`` for ours, ``min_new_tokens`` for HF's), the same model object. Sides:

* ``hf_generate``: ``model.generate`` on the ``prompts x n`` rows, left-padded (TRL's
  GRPOTrainer generates this way without vLLM);
* ``hf_continuous``: ``model.generate_batch`` (transformers' continuous batching,
  paged attention, its own CUDA graphs on a GPU), where the installed transformers has it;
* ``ours_model``: ``DecodeBatch``, the model's own forward with a growing cache;
* ``ours_slots``: ``SlotBatch`` on a ``SlotDecoder`` (CUDA graphs on a GPU), and on a
  GPU ``ours_slots_eager`` (the same without graphs).

Each side runs ``warmup`` times, then ``rounds`` timed rounds, the sides taking turns
round by round (median kept), with ``torch.cuda.synchronize`` around a round on a GPU. Used by
``tests/benchmarks/test_bench_engine.py`` (CPU) and ``build-support/gpu/engine.py``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from backends.inference.embedded.generation import DecodeBatch, run_batch
from backends.inference.embedded.sampling import SamplingParams
from backends.inference.embedded.slot_batch import SlotBatch
from backends.inference.embedded.slot_decode import SlotDecoder


def chat_prompts(tok: Any, texts: list[str]) -> list[list[int]]:
    out = []
    for text in texts:
        enc: Any = tok.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )
        out.append(list(enc["input_ids"]))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ours(
    model: Any, tok: Any, rows: list[tuple[list[int], SamplingParams]], decoder: SlotDecoder | None
) -> list[Any]:
    """One batch of ``rows`` through ``DecodeBatch`` (``decoder`` None) or ``SlotBatch``."""
    kw: dict[str, Any] = {"stop_token_ids": frozenset(), "pad_token_id": tok.pad_token_id or 0}
    if decoder is None:
        return run_batch(DecodeBatch(model, tok, **kw), rows)
    return run_batch(SlotBatch(model, tok, decoder, **kw), rows)


def hf_generate(model: Any, tok: Any, prompts: list[list[int]], n: int, tokens: int) -> int:
    """``model.generate`` on every prompt x ``n``, left-padded; returns the new tokens."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts for _ in range(n)])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts for _ in range(n)])
    out = model.generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=tokens,
        min_new_tokens=tokens,
        pad_token_id=pad,
    )
    return int((out.shape[1] - width) * out.shape[0])


def hf_continuous(model: Any, tok: Any, prompts: list[list[int]], n: int, tokens: int) -> int:
    """``model.generate_batch`` (transformers' continuous batching); the new tokens."""
    from transformers import GenerationConfig

    cfg = GenerationConfig(
        max_new_tokens=tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        eos_token_id=None,
        pad_token_id=tok.pad_token_id or 0,
    )
    out = model.generate_batch(
        inputs=[p for p in prompts for _ in range(n)], generation_config=cfg, progress_bar=False
    )
    return sum(len(o.generated_tokens) for o in out.values())


def _round(fn: Callable[[], int], device: torch.device) -> tuple[float, int]:
    _sync(device)
    start = time.perf_counter()
    count = fn()
    _sync(device)
    return time.perf_counter() - start, count


def compare(
    model: Any,
    tok: Any,
    prompts: list[list[int]],
    *,
    n: int,
    tokens: int,
    warmup: int = 1,
    rounds: int = 3,
    sides: tuple[str, ...] = ("hf_generate", "hf_continuous", "ours_model", "ours_slots"),
) -> dict[str, Any]:
    """Every side of the module doc on one workload; ``{side: timing | {"error": ...}}``."""
    device = next(model.parameters()).device
    rows = [
        (p, SamplingParams(max_tokens=tokens, temperature=1.0, seed=1000 * i + j, ignore_eos=True))
        for i, p in enumerate(prompts)
        for j in range(n)
    ]
    width = max(len(p) for p in prompts) + tokens + 1

    def slots(graphs: bool) -> SlotDecoder:
        return SlotDecoder(model, slots=len(rows), width=width, graphs=graphs, budget_bytes=1 << 40)

    def count(outs: list[Any]) -> int:
        return sum(len(o.token_ids) for o in outs)

    decoders: dict[str, SlotDecoder] = {}
    fns: dict[str, Callable[[], int]] = {
        "hf_generate": lambda: hf_generate(model, tok, prompts, n, tokens),
        "hf_continuous": lambda: hf_continuous(model, tok, prompts, n, tokens),
        "ours_model": lambda: count(ours(model, tok, rows, None)),
        "ours_slots": lambda: count(ours(model, tok, rows, decoders.setdefault("g", slots(True)))),
        "ours_slots_eager": lambda: count(
            ours(model, tok, rows, decoders.setdefault("e", slots(False)))
        ),
    }
    result: dict[str, Any] = {"rows": len(rows), "tokens_per_row": tokens}
    runs: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    failed: set[str] = set()
    with torch.inference_mode():
        for r in range(warmup + rounds):  # the sides take turns, round by round
            for side in sides:
                if side in failed:
                    continue
                try:
                    seconds, counts[side] = _round(fns[side], device)
                except Exception as exc:  # (a side the installed libraries cannot run)
                    result[side] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                    failed.add(side)
                    continue
                if r >= warmup:
                    runs.setdefault(side, []).append(seconds)
    for side, times in runs.items():
        median = statistics.median(times)
        result[side] = {
            "median_s": median,
            "tokens": counts[side],
            "tokens_per_s": counts[side] / median,
            "times": times,
        }
    return result
