"""The generation-heavy runs (issue 18): ``nexrl train`` and TRL on the side-by-side
workload (``bench.side_by_side``) with 64-token answers on both sides, each side
asserting that every answer really is ``RESPONSE`` tokens (ours: the fixed-length
worker sends ``ignore_eos``; TRL: ``min_new_tokens``). Used by
tests/benchmarks/test_bench_generation_heavy.py (CPU) and build-support/gpu/gen_heavy.py.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.side_by_side import (
    DATA,
    EVALUATOR,
    GROUP,
    LR,
    N_PROMPTS,
    PROMPTS,
    ours_command,
    ours_summary,
    pool_trajectories,
    read_rows,
    run_command,
    summarize,
)

STEPS = 10
RESPONSE = 64
WORKER = "src/python/bench/fixed_length_worker.py:FixedLengthWorker"


def n_params(model_dir: Path) -> int:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return sum(p.numel() for p in model.parameters())


def run_ours(
    tmp_path: Path, name: str, model_dir: Path, extra: list[str], steps: int = STEPS
) -> dict[str, Any]:
    out = tmp_path / name
    cmd = ours_command(
        out,
        model_dir,
        steps,
        f"rollout_worker.max_response_length={RESPONSE}",
        f"rollout_worker.custom_worker={WORKER}",
        *extra,
    )
    start = run_command(cmd, tmp_path / f"{name}.log")
    rows = [r for r in read_rows(out) if "reward/mean" in r]
    s = ours_summary(rows, start, steps)
    trajs = pool_trajectories(out, consumer=f"{name}-check")
    assert len(trajs) >= steps * PROMPTS * GROUP
    lengths = {len(t.response_ids) for t in trajs}
    assert lengths == {RESPONSE}, lengths  # every answer really is 64 tokens
    s["lags"] = sorted({r.get("version/lag_max") for r in rows}, key=str)
    reloads = [float(r["timing/reload"]) for r in rows[1:] if "timing/reload" in r]
    s["median_reload_s"] = statistics.median(reloads) if reloads else None
    return s


def run_trl(
    tmp_path: Path,
    model_dir: Path,
    entropy: float,
    threads: int = 1,
    steps: int = STEPS,
    device: str = "cpu",
) -> dict[str, Any]:
    """TRL with ``threads`` torch threads (0: torch's default, one per core) on
    ``device`` (cuda: bf16, build-support/gpu/gen_heavy.py)."""
    out = tmp_path / f"trl-{threads}"
    cmd = [
        sys.executable,
        "-m",
        "bench.trl_grpo",
        f"--model={model_dir}",
        f"--data={DATA}",
        f"--max-samples={N_PROMPTS}",
        f"--evaluator={EVALUATOR}",
        f"--out={out}",
        f"--steps={steps}",
        f"--prompts={PROMPTS}",
        f"--group-size={GROUP}",
        f"--lr={LR}",
        f"--entropy-coef={entropy}",
        f"--max-new-tokens={RESPONSE}",
        f"--min-new-tokens={RESPONSE}",
        f"--threads={threads}",
        f"--device={device}",
    ]
    start = run_command(cmd, tmp_path / f"trl-{threads}.log")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # every completion of every step really is 64 tokens
        assert r["completion_min_length"] == r["completion_max_length"] == RESPONSE, r
    s = summarize(rows, start, float(rows[0]["train_start"]), steps)
    s["torch_threads"] = json.loads((out / "setup.json").read_text())["torch_threads"]
    return s
