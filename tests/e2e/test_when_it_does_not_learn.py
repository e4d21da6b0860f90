"""docs/user-guide.md, "When it does not learn", run end to end on recipes/top_two: a
task the default recipe does not learn from scratch (two-token answers, only the
exact pair rewarded), what the run says about it, and the remedies the guide gives,
each turning it into a run that learns (greedy validation on held-out prompts).

The recipes run as they ship, stopped early on their own learning-rate schedule
(``trainer.lr_schedule_steps``: the first N steps of the full run, which is seeded
and repeatable) to keep CI short; the guide's numbers are the full runs'
(docs/benchmarks.md). The assertions leave room for the spread between machines.
The curriculum (two stages, 175 steps) runs with ``NEXRL_BENCH_LONG=1`` only; the
staged start it relies on (``model.path`` = a run folder, ``parent.json``) is in CI
through tests/e2e/test_sft_then_rl.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import read_rows

SCRATCH = "recipes/top_two/top_two_tiny.yaml"
SFT = "recipes/top_two/top_two_sft.yaml"
FROM_SFT = "recipes/top_two/top_two_from_sft.yaml"
STAGE1 = "recipes/top_two/top_two_stage1.yaml"
STAGE2 = "recipes/top_two/top_two_stage2.yaml"


def run(recipe: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    """``recipe`` trained into ``out`` (in this process, as ``nexrl train`` does);
    its metrics rows."""
    checked = load_recipe_checked(
        recipe, [f"output_dir={out}", "cluster.dashboard_address=127.0.0.1:0", *extra]
    )
    Controller(checked, progress=False).run()
    return read_rows(out)


def val(rows: list[dict[str, Any]], key: str = "val/reward/mean") -> list[float]:
    return [r[key] for r in rows if key in r]


def train(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if "reward/mean" in r]


def test_from_scratch_it_does_not_learn_and_the_run_says_why(tmp_path: Path) -> None:
    out = tmp_path / "scratch"
    rows = run(SCRATCH, out, "trainer.total_train_steps=30", "trainer.lr_schedule_steps=300")
    reward = train(rows, "reward/mean")
    assert len(reward) == 30 and max(reward) <= 0.05, reward  # (measured: 0.0 every step)
    zero_var = train(rows, "rollout/zero_variance_groups")
    assert sum(z >= 0.9 for z in zero_var) >= 25, zero_var  # nothing to learn from
    log = (out / "logs" / "driver.log").read_text()
    assert "of the groups gave every sample the same reward" in log
    assert 'nothing to learn from (rollout/zero_variance_groups); see "When it does not' in log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["zero_variance_last5"] >= 0.9, summary
    assert summary["reward_last5_mean"] <= 0.05, summary


def test_an_sft_warm_start_then_rl_learns(tmp_path: Path) -> None:
    sft = tmp_path / "sft"
    run(SFT, sft)
    rows = run(
        FROM_SFT,
        tmp_path / "rl",
        f"model.path={sft / 'snapshots' / 'latest'}",
        "trainer.total_train_steps=50",
        "trainer.lr_schedule_steps=100",
    )
    curve = val(rows)  # steps 0, 25, 50
    # step 0 is the SFT weights on held-out prompts (from scratch: ~0.04)
    assert curve[0] >= 0.5, curve  # (measured: 0.73)
    assert curve[-1] >= 0.6, curve  # RL keeps what SFT taught (measured: 0.78-0.84)
    reward = train(rows, "reward/mean")
    assert sum(reward[-5:]) / 5 >= 0.6, reward  # sampled at temperature 1 too


@pytest.mark.skipif(
    os.environ.get("NEXRL_BENCH_LONG") != "1",
    reason="175 stage steps (~3.5 min on 2 cores, beyond CI's budget): NEXRL_BENCH_LONG=1 runs it",
)
def test_a_curriculum_learns(tmp_path: Path) -> None:
    stage1 = tmp_path / "stage1"
    first = run(STAGE1, stage1, "trainer.total_train_steps=125", "trainer.lr_schedule_steps=200")
    exact = val(first, "val/eval/exact")  # stage 1's reward is the partial credit
    assert exact[0] <= 0.05 and exact[-1] >= 0.1, exact  # (measured: 0.00 -> 0.20)
    rows = run(
        STAGE2,
        tmp_path / "stage2",
        f"model.path={stage1}",  # the recipe's runs/top_two_stage1, here under tmp_path
        "trainer.total_train_steps=50",
        "trainer.lr_schedule_steps=100",
    )
    curve = val(rows)  # the exact pair, steps 0, 25, 50
    assert max(curve) >= 0.15, curve  # from scratch: <= 0.04 (measured: 0.20 -> 0.27)
    # stage 2 started from stage 1's last snapshot (v125), recorded as its parent
    parent = json.loads((tmp_path / "stage2" / "parent.json").read_text())
    assert (parent["run"], parent["version"]) == (str(stage1.resolve()), 125)
    assert parent["experiment_name"] == "top_two_stage1"
