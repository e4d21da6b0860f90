"""End-to-end: a config-defined tool-calling agent trained through the controller.

The policy is a model with known weights that calls a tool on every turn, so
every episode runs ``max_turns`` (3) model calls: each becomes a trajectory
(``agent_trajectory: per_call``), several trajectories share a run id, and GRPO
groups them by episode."""

from __future__ import annotations

import json
import math
from pathlib import Path

from nexrl.core.pool import read_pool, read_traces
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import train_rows
from tests.integration.inference._known_model import save_bigram_model

RECIPE = "recipes/calculator/calculator_agent_tiny.yaml"


def test_agent_episodes_become_per_call_trajectories_and_train(tmp_path: Path) -> None:
    model = save_bigram_model(tmp_path / "model", '<tool_call>{"name": "f"}</tool_call>')
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        [
            f"output_dir={out}",
            f"model.path={model}",
            "trainer.total_train_steps=2",
            "trajectory_pool.batch_size=8",  # 2 prompts x 4 episodes per step
            "trainer.lr=0",  # keep the known weights: every episode calls a tool 3 times
            "cluster.dashboard_address=127.0.0.1:0",
            "validate.validate_before_train=false",  # the recipe validates the tiny model
            "validate.every=0",
        ],
    )
    assert Controller(recipe, progress=False).run().steps == 2
    for row in train_rows(out):
        # 2 groups x 4 episodes x 3 model calls, trained together
        assert row["pool/batch_size"] == 24 and row["batch/size"] == 24
        assert row["batch/num_groups"] == 2
        assert all(
            math.isfinite(row[k]) for k in ("actor/pg_loss", "critic/advantages/mean")
        )  # several trajectories per run id: no NaN from GRPO's group statistics

    # every trajectory carries its episode's trace into the pool: 3 model calls, each
    # followed by the tool call it asked for, which fails ('f' is not a calculator tool)
    traces = read_traces(str(out / "pool.zarr"))
    assert len(traces) == int(read_pool(str(out / "pool.zarr")).sizes["trajectory"]) >= 48
    for spans in traces:
        assert [s["kind"] for s in spans] == ["llm", "tool"] * 3
        assert all(s["prompt_tokens"] > 0 and s["completion_tokens"] > 0 for s in spans[::2])
        assert all(s["name"] == "f" and "unknown tool 'f'" in s["error"] for s in spans[1::2])
    # the dashboard's sample rows hold it for the page (shown for the selected row)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all("unknown tool" in s["trace_html"] for s in samples)
