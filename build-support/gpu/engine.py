"""The generation engine alone on the GPU: ours (decoder slots with and without CUDA
graphs, the model's own forward) against HF ``generate`` and transformers' continuous
batching, one workload, one process (``bench.engine``); then two checks of the slots
on the GPU: their log-probs against a full forward pass of the same model over the
generated sequences (what the trainer computes), and a seeded row's tokens alone vs
in the batch. Writes ``engine.json`` into the folder given.

    python build-support/gpu/engine.py OUT [--small]   # --small: a CPU dry run
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from gen_heavy import prepared_model

from backends.inference.embedded.sampling import SamplingParams
from backends.inference.embedded.slot_decode import SlotDecoder
from bench.engine import chat_prompts, compare, ours

TEXTS = [
    f"What is the largest digit of {a} {b} {c}?"
    for a, b, c in [
        (3, 7, 5),
        (9, 1, 2),
        (4, 4, 8),
        (6, 0, 3),
        (1, 2, 7),
        (8, 5, 9),
        (2, 6, 1),
        (5, 3, 0),
        (7, 7, 2),
        (0, 9, 4),
        (3, 8, 6),
        (1, 1, 5),
        (9, 2, 8),
        (4, 6, 6),
        (2, 0, 7),
        (8, 3, 1),
    ]
]


def checks(model: Any, tok: Any, prompts: list[list[int]], graphs: bool) -> dict[str, Any]:
    """Slots' log-probs vs a full forward; a seeded row alone vs in a batch of 128."""
    device = next(model.parameters()).device
    rows = [
        (p, SamplingParams(max_tokens=32, temperature=1.0, seed=7 * i + j, ignore_eos=True))
        for i, p in enumerate(prompts)
        for j in range(8)
    ]
    dec = SlotDecoder(model, slots=len(rows), width=128, graphs=graphs, budget_bytes=1 << 40)
    with torch.inference_mode():
        outs = ours(model, tok, rows, dec)
        diffs = []
        for (ids, _), out in list(zip(rows, outs, strict=True))[:16]:
            seq = torch.tensor([ids + out.token_ids], device=device)
            logits = model(input_ids=seq).logits[0, len(ids) - 1 : -1].float()
            ref = torch.log_softmax(logits, -1).gather(-1, seq[0, len(ids) :, None])[:, 0]
            diffs.append(float((ref - torch.tensor(out.logprobs, device=device)).abs().max()))
        alone = [ours(model, tok, [row], dec)[0].token_ids for row in rows[:8]]
    same = sum(a == o.token_ids for a, o in zip(alone, outs[:8], strict=False))
    return {
        "logprob_max_abs_diff_vs_full_forward": max(diffs),
        "logprob_median_max_abs_diff": sorted(diffs)[len(diffs) // 2],
        "seeded_rows_same_alone_and_in_batch": f"{same}/8",
    }


def main(out: Path, small: bool) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, _ = prepared_model(Path("/tmp/nexrl-engine"), small)
    device = torch.device("cpu" if small else "cuda")
    dtype = torch.float32 if small else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = chat_prompts(tok, TEXTS)
    n_params = sum(p.numel() for p in model.parameters())
    sides = ("hf_generate", "ours_model", "ours_slots_eager", "ours_slots", "hf_continuous")
    if "--quick" in sys.argv[2:]:  # (HF generate and ours only)
        sides = ("hf_generate", "ours_slots")
    result: dict[str, Any] = {"params": n_params, "device": str(device), "dtype": str(dtype)}
    result.update(compare(model, tok, prompts, n=8, tokens=64, warmup=1, rounds=3, sides=sides))
    try:
        result["checks"] = checks(model, tok, prompts, graphs=not small)
    except Exception as exc:
        result["checks"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    (out / "engine.json").write_text(json.dumps(result, indent=1))
    print(f"model {n_params:,} parameters, {device} {dtype}; 16 prompts x 8, 64 tokens each")
    base = result["hf_generate"].get("tokens_per_s")
    for side in sides:
        r = result[side]
        if "error" in r:
            print(f"{side:18} error: {r['error']}")
            continue
        rel = f"{r['tokens_per_s'] / base:.2f}x HF generate" if base else ""
        print(f"{side:18} {r['median_s']:.3f} s  {r['tokens_per_s']:>10.0f} tok/s  {rel}")
    print("checks:", result["checks"])


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--small" in sys.argv[2:])
