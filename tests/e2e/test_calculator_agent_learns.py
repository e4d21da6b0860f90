"""End-to-end: the calculator recipe as shipped — warm start of the tiny model on
demonstrations, then GRPO through the controller (embedded inference server,
agent rollouts that call a real Python tool, DeepSpeed trainer) — and the reward
rises because the policy learns to call the tool.

The margin is below every measured run of this short version (docs/benchmarks.md
lists them): the first-5-step mean reward is about a quarter (the warm-started
policy calls the tool in ~30% of episodes, like its demonstrations), the
last-5-step mean is far higher."""

from __future__ import annotations

import statistics
from pathlib import Path

from nexrl.config.recipe import load_recipe_checked
from nexrl.config.sections.pool import TrajectoryPoolConfig
from nexrl.controller import Controller
from nexrl.pool import TrajectoryPool
from tests.e2e._recipe import train_rows

RECIPE = "recipes/calculator/calculator_agent_tiny.yaml"
STEPS = 20
MARGIN = 0.3


def test_calculator_agent_learns_to_call_the_tool(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        [
            f"output_dir={out}",
            f"trainer.total_train_steps={STEPS}",
            "validate.freq=0",
            "validate.validate_before_train=false",
            "cluster.dashboard_address=:0",
            "runtime_monitor.health_check_interval_s=1",
        ],
    )
    assert Controller(recipe, progress=False).run().steps == STEPS

    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    reward = [r["reward/mean"] for r in rows]
    first, last = statistics.mean(reward[:5]), statistics.mean(reward[-5:])
    assert last - first >= MARGIN, reward

    # The reward comes from real tool-calling episodes, and more of them as RL goes
    # on: each trajectory in the pool records whether its episode called the tool.
    pool = TrajectoryPool(TrajectoryPoolConfig(store=str(out / "pool.zarr"), key_list=[]))
    ds = pool.to_xarray()
    version = ds["policy_version"].values
    used = ds["metric_used_tool"].values == 1.0
    rewarded = ds["reward"].values == 1.0
    assert rewarded.sum() > 0 and used[rewarded].mean() >= 0.9
    early, late = used[version < 5].mean(), used[version >= STEPS - 5].mean()
    assert late - early >= MARGIN, (early, late)
