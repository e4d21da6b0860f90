"""Dynamic sampling (DAPO) through the real controller: the default recipe's first
policy is near uniform, so many groups of 8 get reward 0 everywhere; those are
filtered in the pool, the controller rolls out replacements, and each step trains
on informative groups only. Every count in metrics.jsonl is checked against the
pool's own record (its cursor and per-trajectory delivery status)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows


def test_filtered_groups_are_replaced_and_counted(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "algorithm.filter_zero_variance_groups=true",
            "algorithm.max_extra_sampling_rounds=2",
            steps=3,
        ),
    )
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (3, None)
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        kept, dropped = r["filter/kept_groups"], r["filter/dropped_groups"]
        assert r["pool/num_groups"] == kept and r["pool/batch_size"] == 8 * kept
        assert r["filter/extra_rounds"] == math.ceil(dropped / 4)  # 4 groups per batch
        # a full batch, or a short one only once 2 rounds' worth (8 groups) were filtered
        assert (kept == 4 and r["filter/short_batch"] == 0) or (
            r["filter/short_batch"] == 1 and dropped >= 8 and 1 <= kept < 4
        ), r
        assert r["reward/std"] > 0  # no group in the batch is uninformative
    assert sum(r["filter/dropped_groups"] for r in rows) > 0  # the filter did work here

    pool = TrajectoryPool(
        PoolConfig(store=str(out / "pool.zarr"), key_list=["group_id"], group_size=8, batch_size=32)
    )
    stats = pool.stats()
    assert stats.filtered_groups == sum(r["filter/dropped_groups"] for r in rows)
    assert stats.filtered_trajectories == 8 * stats.filtered_groups
    assert stats.delivered == sum(r["pool/batch_size"] for r in rows)
    ds = pool.to_xarray()
    status, gid, reward = ds["status"].values, ds["group_id"].values, ds["reward"].values
    for code, informative in ((1, True), (2, False)):  # delivered, dropped (filtered)
        groups = np.unique(gid[status == code])
        assert len(groups) == (stats.delivered if informative else stats.filtered_trajectories) / 8
        for g in groups:
            r = reward[(gid == g) & (status == code)]
            assert len(r) == 8 and (r.max() > r.min()) == informative, (g, r)


def test_an_evaluator_that_scores_every_answer_alike_stops_the_run(tmp_path: Path) -> None:
    """Every group has zero variance, so dynamic sampling never finds a group to train:
    the run stops with one line naming the evaluator's likely fault and the field to
    raise (it rolled out forever before, with nothing on the terminal)."""
    from nexrl.driver.controller import ControllerError

    evaluator = tmp_path / "constant.py"
    evaluator.write_text(
        "from nexrl.rollout_worker import EvaluationRunResult, Evaluator\n"
        "class Constant(Evaluator):\n"
        "    def evaluate(self, data, evaluation_target):\n"
        "        return EvaluationRunResult(reward=0.5)\n"
    )
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"rollout_worker.evaluator={evaluator}:Constant",
            "algorithm.filter_zero_variance_groups=true",
            "algorithm.max_extra_sampling_rounds=1",
            steps=3,
        ),
    )
    with pytest.raises(ControllerError) as err:
        Controller(recipe, progress=False).run()
    message = str(err.value)
    # 8 x 1 round x 4 groups per batch = 32 groups filtered for step 1, none kept
    assert message.startswith("dynamic sampling: step 1 found no group with different rewards")
    assert "algorithm.filter_zero_variance_groups" in message
    assert "algorithm.max_extra_sampling_rounds (now 1)" in message and "\n" not in message
    assert train_rows(out) == []
    filtered = int(re.search(r"in (\d+) groups rolled out", message).group(1))  # type: ignore[union-attr]
    assert filtered >= 32
