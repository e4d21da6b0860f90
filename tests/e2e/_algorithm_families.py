"""One short run of the default task (recipes/max_digit) per algorithm family, selected
by recipe overrides only, for a per-family learning test and the chart and table of
docs/benchmarks.md (neither exists yet: this short setting is not tuned; measured once
under heavy load, GRPO went from 0.02 (first 5 steps) to 0.12 (last 5), too little to
call learning)::

    PYTHONPATH=src/python:. python -m tests.e2e._algorithm_families docs/img/algorithm_curves.png

runs every family once (sequentially), writes the chart (reward vs step, one line per
family) and prints the markdown table.

Dr.GRPO is today "GRPO without the std normalisation"; its constant-normaliser loss
aggregation is being added separately (then add its override here).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e._recipe import RECIPE, overrides, train_rows

STEPS = 30
# 8 prompts x 8 samples per step, a higher learning rate than the 300-step recipe
SHORT = ("trajectory_pool.batch_size=64", "trainer.micro_batch_size=64", "trainer.lr=1e-2")

FAMILIES: dict[str, tuple[str, ...]] = {
    "grpo": ("algorithm.advantage_estimator=grpo",),
    "dr_grpo": ("algorithm.advantage_estimator=grpo", "algorithm.norm_adv_by_std=false"),
    "rloo": ("algorithm.advantage_estimator=rloo",),
    "reinforce_pp": ("algorithm.advantage_estimator=reinforce_plus_plus",),
    "gspo": ("algorithm.policy_loss=gspo",),
    "dapo": (
        "algorithm.filter_zero_variance_groups=true",
        "algorithm.max_extra_sampling_rounds=4",
        "algorithm.clip_ratio_high=0.28",
    ),
}


def run_family(name: str, out: Path) -> list[dict[str, Any]]:
    """Run family ``name`` into ``out``; its training rows."""
    from nexrl.controller import Controller
    from nexrl.recipe import load_recipe_checked

    recipe = load_recipe_checked(RECIPE, overrides(out, *SHORT, *FAMILIES[name], steps=STEPS))
    Controller(recipe, progress=False).run()
    return train_rows(out)


def gain(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean reward of the first 5 and of the last 5 steps."""
    rewards = [r["reward/mean"] for r in rows]
    return statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])


def main(png: str, root: str = "runs/algorithm_families") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    table = ["| family | overrides | first 5 steps | last 5 steps | run time |", "| --- " * 5 + "|"]
    for name in FAMILIES:
        t = time.monotonic()
        rows = run_family(name, Path(root) / name)
        first, last = gain(rows)
        ax.plot([r["step"] for r in rows], [r["reward/mean"] for r in rows], label=name)
        table.append(
            f"| {name} | `{' '.join(FAMILIES[name])}` | {first:.3f} | {last:.3f} | "
            f"{time.monotonic() - t:.0f} s |"
        )
        print(table[-1], flush=True)
    ax.set(xlabel="step", ylabel="reward/mean (batch)", title="max_digit, 30 steps per family")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("\n".join(table))


if __name__ == "__main__":
    main(*sys.argv[1:])
