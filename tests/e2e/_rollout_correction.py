"""Rollout correction in a learning run: the default task (recipes/max_digit) trained
``weight.sync_mode: fully-async`` (rollouts keep generating with the weights they
have while the trainer moves on), where the sampler's log-probs really differ from
the trainer's, with and without a correction, all else the same (seed, model init,
data). The table and chart of docs/benchmarks.md ("Rollout correction in a learning
run")::

    PYTHONPATH=src/python:. python -m tests.e2e._rollout_correction docs/img/rollout_correction.png

runs each setting once (sequentially), writes the chart (batch reward and the
trainer-vs-rollout KL per step) and prints the markdown table; after the chart's
path, a root folder and more overrides (``seed=1 ...``) may follow.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.e2e._algorithm_families import SHORT, first_last, validation
from tests.e2e._recipe import RECIPE, overrides, train_rows

STEPS = 100
# fully-async with a lag of up to 2 policy versions behind and a larger lr than the
# families' (1e-2: each update moves the policy more, so stale samples differ more)
ASYNC = (
    "weight.sync_mode=fully-async",
    "weight.staleness_threshold=2",
    "trainer.lr=1e-2",
)

SETTINGS: dict[str, tuple[str, ...]] = {
    "no correction": (),
    "TIS (token, 2.0)": ("algorithm.rollout_correction.mode=tis",),
    "MIS (sequence, 2.0)": (
        "algorithm.rollout_correction.mode=mis",
        "algorithm.rollout_correction.level=sequence",
    ),
}


def folder(name: str) -> str:
    return name.split(" ")[0].lower()


def run_setting(name: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    from nexrl.driver.controller import Controller
    from nexrl.driver.recipe import load_recipe_checked

    given = {e.split("=")[0] for e in extra}  # an override of ASYNC's (trainer.lr=3e-3) wins
    mine = [a for a in (*SHORT, *ASYNC) if a.split("=")[0] not in given]
    args = overrides(out, *mine, *SETTINGS[name], *extra, steps=STEPS)
    Controller(load_recipe_checked(RECIPE, args), progress=False).run()
    return train_rows(out)


def mean_of(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.mean(values) if values else float("nan")


def write_chart(root: Path, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for name in SETTINGS:
        rows = train_rows(root / folder(name))
        steps = [r["step"] for r in rows]
        top.plot(steps, [r["reward/mean"] for r in rows], label=name)
        bottom.plot(steps, [r.get("rollout_corr/kl_k3", float("nan")) for r in rows], label=name)
    top.set(ylabel="reward/mean (the step's batch)", title="max_digit, fully-async, lr 1e-2")
    bottom.set(xlabel="step", ylabel="rollout_corr/kl_k3", yscale="log")
    top.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(png: str, root: str = "runs/rollout_correction", *extra: str) -> None:
    table = [
        "| setting | reward, first 5 steps | last 5 steps | validation, step 0 -> last "
        "| kl_k3 (mean) | version lag (mean) | weight mean | clipped / masked | wall |",
        "| --- " * 9 + "|",
    ]
    for name in SETTINGS:
        out = Path(root) / folder(name)
        t = time.monotonic()
        rows = run_setting(name, out, *extra)
        wall = time.monotonic() - t
        first, last = first_last(rows)
        val = validation(out)
        cut = mean_of(rows, "rollout_corr/clipped_frac") + mean_of(rows, "rollout_corr/masked_frac")
        table.append(
            f"| {name} | {first:.3f} | {last:.3f} | {val[0][1]:.2f} -> {val[-1][1]:.2f} | "
            f"{mean_of(rows, 'rollout_corr/kl_k3'):.2e} | {mean_of(rows, 'version/lag_max'):.2f} | "
            f"{mean_of(rows, 'rollout_corr/weight_mean'):.3f} | {cut:.4f} | {wall:.0f} s |"
        )
        print(table[-1], flush=True)
    write_chart(Path(root), png)
    print("\n".join(table))


if __name__ == "__main__":
    main(*sys.argv[1:])
