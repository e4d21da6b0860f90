"""Side by side with TRL: the default recipe through ``nexrl train`` vs TRL 1.16's
``GRPOTrainer`` (``bench.trl_grpo``) on the identical workload, one
after the other in the same test (TRL first, as the baseline).

The workload (recipes/max_digit/max_digit_tiny.yaml's task): "largest of three
digits", one-token answers, rewards from ``MaxDigitEvaluator``; the recipe's tiny
model built once by our model preparation and loaded by both from that folder
(``model.path``; TRL ``model=<folder>``, its tokenizer from the same folder); the
first 208 prompts of train.jsonl in file order (13 whole steps per epoch: TRL's
sampler drops a short last batch, so 210 would not give both the same steps);
16 prompts x 8 samples per step, temperature 1, one new token, lr 3e-3
constant on both sides, no KL on either, the recipe's entropy bonus 0.03 on both
(same definition: minus coef x mean token entropy), PPO clip 0.2 with one update
per batch (ratio 1), grad-norm clip 1.0, AdamW (0.9, 0.999), no weight decay.

What still differs (docs/benchmarks.md, "Versus TRL"): ours samples in its
inference server with a per-request seed, TRL samples in its training process
with torch's generator; both train the step's 128 samples in one micro-batch
(ours in 2 of 64 before 2026-11-26, the same gradient); ours runs on a Dask LocalCluster (2 worker processes) with 1
torch thread for the trainer and 1 for the server, TRL in one process with 1
thread; ours keeps its end-of-run checkpoint (after the last row, not timed).

Asserted (so the comparison cannot drift): TRL's model at the start of training
has the parameter checksum of the prepared folder and its tokenizer vocabulary
and chat template; our run sampled step 1 with those weights (the server's
behaviour log-probs equal the folder model's) and every step's prompts are TRL's
prompt token ids of the same step, in the same order. Times are recorded in
``extra_info`` and printed, never asserted.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from bench.side_by_side import (
    DATA,
    EVALUATOR,
    GROUP,
    LR,
    N_PROMPTS,
    PROMPTS,
    RECIPE,
    STEPS,
    TARGET,
    ours_command,
    ours_summary,
    pool_trajectories,
    ratio,
    read_rows,
    run_command,
    summarize,
)
from bench.trl_grpo import param_checksum
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked


def artifacts() -> Path:
    d = Path(os.environ.get("NEXRL_TEST_ARTIFACTS", "dist/test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def check_same_setup(model_dir: Path, ours: Path, trl_setup: dict[str, Any]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).float().eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    # TRL: the weights, vocabulary and chat template it started training with.
    assert trl_setup["param_checksum"] == param_checksum(model)
    assert trl_setup["vocab"] == tok.get_vocab()
    assert trl_setup["chat_template"] == tok.chat_template
    assert trl_setup["device"] == "cpu"
    # Ours: the run loaded that folder ...
    recorded = yaml.safe_load((ours / "config.yaml").read_text())
    assert recorded["model"]["path"] == str(model_dir)
    assert recorded["model"].get("tokenizer_path") in (None, str(model_dir))
    # ... and every step's prompts are TRL's, token for token, in the same order.
    trl_prompts = trl_setup["step_prompt_ids"]
    assert len(trl_prompts) == STEPS and all(len(p) == PROMPTS for p in trl_prompts)
    trajs = [t for t in pool_trajectories(ours) if t.group_id < STEPS * PROMPTS]
    assert len(trajs) == STEPS * PROMPTS * GROUP
    for t in trajs:
        step, pos = divmod(t.group_id, PROMPTS)
        assert t.policy_version == step, (t.group_id, t.policy_version)  # sync: step s+1 samples vs
        assert list(t.prompt_ids) == trl_prompts[step][pos], (t.group_id, t.prompt_ids)
    # The server sampled step 1 with the folder's weights: its behaviour log-probs are
    # the folder model's log-probs of the sampled tokens.
    first = [t for t in trajs if t.policy_version == 0]
    with torch.no_grad():
        worst = 0.0
        for t in first:
            logits = model(torch.tensor([list(t.prompt_ids)])).logits[0, -1]
            ref = torch.log_softmax(logits.float(), -1)[int(t.response_ids[0])].item()
            worst = max(worst, abs(ref - float(t.logprobs[0])))
    assert worst < 1e-3, worst


def plot(ours: dict[str, Any], trl: dict[str, Any], path: Path) -> None:
    """Mean reward against seconds since the command started (left) and against the
    step (right), both runs on each chart; thin lines per step, thick 5-step means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(3, 2))
    for label, s, colour in (("NexRL (nexrl train)", ours, "C0"), ("TRL GRPOTrainer", trl, "C1")):
        xs = [x for x, _ in s["curve"]]
        ys = [y for _, y in s["curve"]]
        smooth = [statistics.mean(ys[max(0, i - 4) : i + 1]) for i in range(len(ys))]
        steps = range(1, len(ys) + 1)
        for ax, x in ((by_time, xs), (by_step, steps)):
            ax.plot(x, ys, colour, alpha=0.3, lw=1)
            ax.plot(x, smooth, colour, lw=2, label=f"{label}, 5-step mean")
    for ax in (by_time, by_step):
        ax.axhline(TARGET, color="grey", ls=":", lw=1)
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("mean reward of the step")
    by_time.set_xlabel("seconds since the command started (start-up included)")
    by_step.set_xlabel("step")
    by_time.legend(loc="upper left")
    fig.suptitle(
        f"max_digit, same tiny Qwen2 init, 16 prompts x 8 per step, {STEPS} steps, shared 2-core CPU"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def test_bench_vs_trl(benchmark: Any, tmp_path: Path) -> None:
    # The recipe's tiny model, built once by our model preparation, loaded by both.
    recipe = load_recipe_checked(RECIPE, [f"output_dir={tmp_path / 'prep'}"])
    model_dir, tok_dir = prepare_model(recipe.cfg, tmp_path / "prep")
    assert tok_dir == model_dir
    entropy = float(recipe.cfg.algorithm.entropy_coeff)
    assert float(recipe.cfg.algorithm.kl_loss_coef) == 0.0  # no KL on our side: beta=0 in TRL
    assert not recipe.cfg.algorithm.use_kl_in_reward

    trl_out = tmp_path / "trl"
    trl_cmd = [
        sys.executable,
        "-m",
        "bench.trl_grpo",
        f"--model={model_dir}",
        f"--data={DATA}",
        f"--max-samples={N_PROMPTS}",
        f"--evaluator={EVALUATOR}",
        f"--out={trl_out}",
        f"--steps={STEPS}",
        f"--prompts={PROMPTS}",
        f"--group-size={GROUP}",
        f"--lr={LR}",
        f"--entropy-coef={entropy}",
        "--threads=1",
    ]
    trl_start = run_command(trl_cmd, tmp_path / "trl.log")
    trl_rows = [json.loads(line) for line in (trl_out / "metrics.jsonl").read_text().splitlines()]
    trl_setup = json.loads((trl_out / "setup.json").read_text())
    trl = summarize(trl_rows, trl_start, float(trl_rows[0]["train_start"]))

    ours_out = tmp_path / "ours"
    ours_cmd = ours_command(ours_out, model_dir, STEPS)

    def ours_run() -> float:
        return run_command(ours_cmd, tmp_path / "ours.log")

    ours_start = benchmark.pedantic(ours_run, rounds=1, iterations=1)
    rows = [r for r in read_rows(ours_out) if "reward/mean" in r]
    ours = ours_summary(rows, ours_start, STEPS)

    check_same_setup(model_dir, ours_out, trl_setup)

    plot(ours, trl, artifacts() / "vs_trl.png")
    keys = [k for k in ours if k != "curve"]
    info: dict[str, Any] = {f"ours_{k}": ours[k] for k in keys}
    info.update({f"trl_{k}": trl[k] for k in keys if k in trl})
    info.update(
        ratio_step_time=ratio(ours["median_step_s"], trl["median_step_s"]),
        ratio_samples_per_s=ratio(ours["samples_per_s"], trl["samples_per_s"]),
        ratio_command_to_first_row=ratio(
            ours["command_to_first_row_s"], trl["command_to_first_row_s"]
        ),
        ratio_steps_to_target=ratio(ours["steps_to_target"], trl["steps_to_target"]),
        ratio_train_s_to_target=ratio(ours["train_s_to_target"], trl["train_s_to_target"]),
        ratio_steps_to_low_target=ratio(ours["steps_to_low_target"], trl["steps_to_low_target"]),
        ratio_train_s_to_low_target=ratio(
            ours["train_s_to_low_target"], trl["train_s_to_low_target"]
        ),
        steps=STEPS,
        entropy_coef=entropy,
    )
    benchmark.extra_info.update(info)
    (artifacts() / "vs_trl.json").write_text(
        json.dumps({**info, "ours_curve": ours["curve"], "trl_curve": trl["curve"]}, indent=1)
    )

    def fmt(v: Any) -> str:
        if v is None:
            return f"not reached in {STEPS}"
        return f"{v:.3f}" if isinstance(v, float) and math.isfinite(v) else str(v)

    print()
    print(f"{'':32} {'ours':>18} {'TRL':>18} {'ours/TRL':>10}")
    for k, r in (
        ("median_step_s", "ratio_step_time"),
        ("samples_per_s", "ratio_samples_per_s"),
        ("command_to_first_row_s", "ratio_command_to_first_row"),
        ("steps_to_target", "ratio_steps_to_target"),
        ("train_s_to_target", "ratio_train_s_to_target"),
        ("command_s_to_target", None),
        ("steps_to_low_target", "ratio_steps_to_low_target"),
        ("train_s_to_low_target", "ratio_train_s_to_low_target"),
        ("command_s_to_low_target", None),
        ("reward_first5", None),
        ("reward_last5", None),
    ):
        print(
            f"{k:32} {fmt(ours[k]):>18} {fmt(trl[k]):>18} "
            f"{fmt(info[r]) if r and info[r] is not None else '':>10}"
        )
    print(f"ours median timing/step: {ours['median_timing_step_s']:.3f} s")
