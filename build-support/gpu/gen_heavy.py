"""Generation-heavy on the GPU: TRL vs ours (sync) vs ours one step off, one run each.

The CPU benchmark's workload (tests/benchmarks/test_bench_generation_heavy.py: 16
prompts x 8 samples per step, 64-token answers on every side, the same prepared
model folder, prompts in file order, lr, loss settings) with a model of a few
hundred million parameters, bf16 on every side: TRL 1.16's ``GRPOTrainer``
(``python -m bench.trl_grpo --device cuda``: HF ``generate`` and the update
in one process) and ``nexrl train`` (the embedded server and the DeepSpeed trainer
sharing the GPU) in ``weight.sync_mode=sync`` and one step off
(``batch-async``, ``staleness_threshold=1``). Samples/s: 128 over the median gap
between consecutive steps' metrics rows. Prints a table; writes ``gen_heavy.json``
into the folder given (argv[1]).

    python build-support/gpu/gen_heavy.py OUT [--small]   # --small: a CPU dry run
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from bench.generation_heavy import RESPONSE, n_params, run_ours, run_trl
from bench.side_by_side import RECIPE, ratio
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked

# Qwen2.5-0.5B's shape with the task's vocabulary (build-support/gpu/check.sh)
QWEN05 = {"hidden_size": 896, "num_layers": 24, "num_heads": 14, "intermediate_size": 4864}
SMALL = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "intermediate_size": 256}


def _gpu_env() -> None:
    """The CPU benchmark's runs force DeepSpeed onto the CPU (``DS_ACCELERATOR=cpu`` in
    bench.side_by_side.subprocess_env); here our trainer must get the GPU like TRL."""
    import bench.side_by_side as side_by_side

    base = side_by_side.subprocess_env
    side_by_side.subprocess_env = lambda: {k: v for k, v in base().items() if k != "DS_ACCELERATOR"}


def prepared_model(work: Path, small: bool) -> tuple[Path, Any]:
    """An empty ``work`` folder (run folders of an earlier call would resume) and the
    model of Qwen2.5-0.5B's shape (``small``: SMALL's) prepared in it; ``(folder, cfg)``."""
    shutil.rmtree(work, ignore_errors=True)
    overrides = [f"model.tiny.{k}={v}" for k, v in (SMALL if small else QWEN05).items()]
    recipe = load_recipe_checked(RECIPE, [f"output_dir={work / 'prep'}", *overrides])
    model_dir, _ = prepare_model(recipe.cfg, work / "prep")
    return model_dir, recipe.cfg


def main(out: Path, small: bool) -> None:
    if not small:
        _gpu_env()
    steps = 3 if small else 6
    work = Path("/tmp/nexrl-gen-heavy")
    model_dir, cfg = prepared_model(work, small)
    params = n_params(model_dir)
    entropy = float(cfg.algorithm.entropy_coeff)
    results: dict[str, Any] = {"params": params, "steps": steps, "response_tokens": RESPONSE}

    # each side asserts every answer is 64 tokens (TRL's logged lengths, our pool)
    device = "cpu" if small else "cuda"
    results["trl"] = run_trl(work, model_dir, entropy, threads=0, steps=steps, device=device)
    bf16 = [] if small else ["trainer.bf16=true"]
    for name, mode in (
        ("ours_sync", ["weight.sync_mode=sync"]),
        ("ours_one_step_off", ["weight.sync_mode=batch-async", "weight.staleness_threshold=1"]),
    ):
        results[name] = run_ours(work, name, model_dir, [*bf16, *mode], steps=steps)

    for side in ("trl", "ours_sync", "ours_one_step_off"):
        results[side].pop("curve", None)
    sync, off, trl = results["ours_sync"], results["ours_one_step_off"], results["trl"]
    results["ratio_sync_over_trl"] = ratio(sync["samples_per_s"], trl["samples_per_s"])
    results["ratio_one_step_off_over_trl"] = ratio(off["samples_per_s"], trl["samples_per_s"])
    results["ratio_one_step_off_over_sync"] = ratio(off["samples_per_s"], sync["samples_per_s"])
    (out / "gen_heavy.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"model: {params:,} parameters; {steps} steps of 16 x 8 samples, {RESPONSE} tokens")
    print(f"{'':24} {'TRL':>10} {'ours sync':>10} {'one off':>10}")
    for key in ("median_step_s", "samples_per_s", "command_to_first_row_s"):
        print(f"{key:24} {trl[key]:>10.3f} {sync[key]:>10.3f} {off[key]:>10.3f}")
    for key in [k for k in results if k.startswith("ratio_")]:
        print(f"{key}: {results[key]:.3f}")
    print(f"one step off lags: {off['lags']}; sync lags: {sync['lags']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--small" in sys.argv[2:])
