"""One short run of the default task (recipes/max_digit) per algorithm family, each
selected by recipe overrides only, with the same settings, seed, model init and data:
the per-family learning test (tests/e2e/test_algorithm_families_learn.py) and the
chart and table of docs/benchmarks.md ("Algorithm families")::

    PYTHONPATH=src/python:. python -m tests.e2e._algorithm_families docs/img/algorithm_families.png

runs every family once (sequentially), writes the chart (reward vs step, one line per
family) and prints the markdown table; after the chart's path, a run folder and more
overrides (e.g. ``model.tiny.seed=1 data.seed=43`` for another seed) may follow.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e._recipe import RECIPE, overrides, read_rows, train_rows

STEPS = 100
# 8 prompts x 8 samples per step, the recipe's lr 3e-3 held constant (its cosine over
# 300 steps is for the long run; 5e-3 plateaued at 0.28 for GRPO), validation on the
# 49 held-out prompts before training and every 25 steps (greedy: the same measure for
# every family, DAPO's batch reward being over its informative groups only).
SHORT = (
    "trajectory_pool.batch_size=64",
    "trainer.micro_batch_size=64",
    "trainer.lr=3e-3",
    "trainer.lr_scheduler=constant",
    "validate.validate_before_train=true",
    "validate.every=25",
)

# name -> the overrides that select the family (everything else is the recipe's).
FAMILIES: dict[str, tuple[str, ...]] = {
    "GRPO": (),  # the recipe: grpo advantages, ppo_clip, token-mean
    "Dr.GRPO": ("algorithm.advantage_estimator=dr_grpo",),
    "RLOO": ("algorithm.advantage_estimator=rloo",),
    "REINFORCE++": ("algorithm.advantage_estimator=reinforce_plus_plus",),
    "GSPO": ("algorithm.policy_loss=gspo",),
    # the value model at lr 1e-2 (the policy's 3e-3): at 3e-3 it explained nothing of
    # the returns for ~50 steps (seed 1: +0.28 reward; at 1e-2: +0.51)
    "PPO": (
        "trainer.type=self_hosted_ppo",
        "algorithm.advantage_estimator=gae",
        "trainer.critic.lr=1e-2",
    ),
    "DAPO": (
        "algorithm.filter_zero_variance_groups=true",
        "algorithm.max_extra_sampling_rounds=4",
        "algorithm.clip_ratio_high=0.28",
    ),
}

# name -> the algorithm fields each family's run must show in its config.yaml (the
# values in effect, filled in from each algorithm's own defaults by the loader).
EXPECTED: dict[str, dict[str, Any]] = {
    "GRPO": {
        "advantage_estimator": "grpo",
        "norm_adv_by_std": True,
        "policy_loss": "ppo_clip",
        "loss_agg_mode": "token-mean",
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
        "filter_zero_variance_groups": False,
    },
    "Dr.GRPO": {
        "advantage_estimator": "dr_grpo",
        "norm_adv_by_std": False,
        "policy_loss": "ppo_clip",
        "loss_agg_mode": "seq-mean-token-sum-norm",
        "loss_norm_length": 1.0,  # rollout_worker.max_response_length
    },
    "RLOO": {"advantage_estimator": "rloo", "policy_loss": "ppo_clip"},
    "REINFORCE++": {"advantage_estimator": "reinforce_plus_plus", "policy_loss": "ppo_clip"},
    "GSPO": {
        "advantage_estimator": "grpo",
        "policy_loss": "gspo",
        "loss_agg_mode": "seq-mean-token-mean",
        "clip_ratio_low": 3e-4,
        "clip_ratio_high": 4e-4,
    },
    "PPO": {"advantage_estimator": "gae", "gamma": 1.0, "lam": 1.0, "policy_loss": "ppo_clip"},
    "DAPO": {
        "advantage_estimator": "grpo",
        "policy_loss": "ppo_clip",
        "loss_agg_mode": "token-mean",
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "filter_zero_variance_groups": True,
    },
}


def run_family(name: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    """Run family ``name`` into ``out`` (``extra``: more overrides, e.g. a seed); its
    training rows."""
    from nexrl.driver.controller import Controller
    from nexrl.driver.recipe import load_recipe_checked

    args = overrides(out, *SHORT, *FAMILIES[name], *extra, steps=STEPS)
    Controller(load_recipe_checked(RECIPE, args), progress=False).run()
    return train_rows(out)


def algorithm_in_effect(out: Path) -> dict[str, Any]:
    """The ``algorithm`` section of the run's config.yaml."""
    return dict(yaml.safe_load((out / "config.yaml").read_text())["algorithm"])


def first_last(rows: list[dict[str, Any]], key: str = "reward/mean") -> tuple[float, float]:
    """Mean of ``key`` over the first 5 and over the last 5 steps."""
    values = [r[key] for r in rows]
    return statistics.mean(values[:5]), statistics.mean(values[-5:])


def validation(out: Path) -> list[tuple[int, float]]:
    """(step, greedy reward on the held-out prompts) of the run's validations."""
    return [(r["step"], r["val/reward/mean"]) for r in read_rows(out) if "val/reward/mean" in r]


def folder(name: str) -> str:
    """The run folder's name of family ``name`` (``Dr.GRPO`` -> ``drgrpo``)."""
    return name.replace(".", "").replace("+", "p").lower()


def write_chart(root: Path, png: str) -> None:
    """Reward vs step of the runs under ``root``, one line per family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in FAMILIES:
        rows = train_rows(root / folder(name))
        # GSPO's line lies on GRPO's on this task (docs/benchmarks.md says why): dashed
        style = "--" if name == "GSPO" else "-"
        label = f"{name} (batch: informative groups only)" if name == "DAPO" else name
        ax.plot([r["step"] for r in rows], [r["reward/mean"] for r in rows], style, label=label)
    ax.set(
        xlabel="step",
        ylabel="reward/mean (the step's batch)",
        title=f"max_digit, {STEPS} steps of 8 prompts x 8 samples per family",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(png: str, root: str = "runs/algorithm_families", *extra: str) -> None:
    table = [
        "| family | estimator / loss / aggregation | reward, first 5 steps | last 5 steps "
        "| validation, step 0 -> last | steps | wall |",
        "| --- " * 7 + "|",
    ]
    for name in FAMILIES:
        out = Path(root) / folder(name)
        t = time.monotonic()
        rows = run_family(name, out, *extra)
        wall = time.monotonic() - t
        first, last = first_last(rows)
        val = validation(out)
        algo = algorithm_in_effect(out)
        table.append(
            f"| {name} | {algo['advantage_estimator']} / {algo['policy_loss']} / "
            f"{algo['loss_agg_mode']} | {first:.3f} | {last:.3f} | "
            f"{val[0][1]:.2f} -> {val[-1][1]:.2f} | {len(rows)} | {wall:.0f} s |"
        )
        print(table[-1], flush=True)
    write_chart(Path(root), png)
    print("\n".join(table))


if __name__ == "__main__":
    main(*sys.argv[1:])
