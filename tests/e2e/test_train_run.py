"""End-to-end: the default recipe on a real LocalCluster (processes), the embedded
inference server, DeepSpeed trainer actors and the zarr pool."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psutil
import pytest

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import DATA, RECIPE, overrides, read_rows, train_rows


def pool_of(out: Path) -> TrajectoryPool:
    return TrajectoryPool(
        PoolConfig(store=str(out / "pool.zarr"), key_list=["group_id"], group_size=8, batch_size=32)
    )


def delivered_pairs(out: Path) -> list[tuple[int, int]]:
    ds = pool_of(out).to_xarray()
    status = ds["status"].values
    gid, rid = ds["group_id"].values[status == 1], ds["run_id"].values[status == 1]
    return list(zip(gid.tolist(), rid.tolist(), strict=True))


def processes_using(path: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(path) in part for part in p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_sync_run_trains_on_rollouts_from_the_reloaded_weights(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "validate.validate_before_train=true",
            "validate.every=2",
            "trainer.save_every=1",  # a checkpoint per step, the newest 2 kept
            "trainer.keep_checkpoints=2",
            steps=4,
        ),
    )
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (4, None)

    rows = read_rows(out)
    train = train_rows(out)
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    for r in train:
        # The inference server reports the version that sampled each trajectory: in
        # sync mode step k trains on rollouts of the weights published by step k-1.
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/trainer"] == r["version/inference"] == r["step"]
        assert r["pool/batch_size"] == 32 and r["pool/num_groups"] == 4
        assert 0.0 <= r["reward/mean"] <= 1.0
        for key in ("timing/wait_batch", "timing/train", "timing/weight_sync", "timing/step"):
            assert r[key] > 0
    val = [r for r in rows if "val/reward/mean" in r]
    assert [r["step"] for r in val] == [0, 2, 4]
    assert all(r["val/num_samples"] == 49 for r in val)  # every held-out prompt once

    # Everything of the run is in its folder.
    assert (out / "config.yaml").read_text().count("experiment_name: max_digit_tiny") == 1
    assert (out / "plots" / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["steps_run"], summary["first_step"], summary["last_step"]) == (4, 1, 4)
    ckpt = CheckpointManager(out / "checkpoints").latest()
    assert ckpt is not None and ckpt.name.endswith("4")
    assert [step for step, _ in CheckpointManager(out / "checkpoints").complete()] == [3, 4]
    snap = latest_snapshot(out / "snapshots")
    assert snap is not None and snap[0] == 4
    assert (out / "logs" / "inference.log").exists()
    # logs/driver.log has what the terminal showed, each step's line included
    driver_log = (out / "logs" / "driver.log").read_text()
    assert f"nexrl: run folder {out}" in driver_log
    for step in (1, 2, 3, 4):
        assert f"step {step}/4 reward=" in driver_log
    assert "validation at step 4: reward" in driver_log
    assert "steps: 4 (1 -> 4)" in driver_log  # the summary too

    # The ranks read each step's rows from the pool (BatchRef): no batch file.
    assert not (out / "batches").exists()
    # Every trajectory handed to the trainer exactly once, 4 batches of 32.
    pairs = delivered_pairs(out)
    assert len(pairs) == 4 * 32 and len(set(pairs)) == len(pairs)
    # Nothing left running: the server, workers and trainer are gone.
    assert processes_using(out) == []


@pytest.mark.parametrize("mode", ["batch-async", "fully-async"])
def test_async_modes_bound_staleness_and_keep_syncing(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(out, f"weight.sync_mode={mode}", "weight.staleness_threshold=2", steps=6),
    )
    result = Controller(recipe, progress=False).run()
    assert result.steps == 6
    train = train_rows(out)
    lags = [r["version/lag_max"] for r in train]
    assert max(lags) <= 2  # trajectories more than 2 versions old are never trained on
    assert max(lags) >= 1  # rollouts really ran ahead of training
    # The inference service keeps receiving new weights: its version follows the trainer's
    # to the end (the original NexRL's fully-async never re-synced after the start).
    assert [r["version/inference"] for r in train] == [1, 2, 3, 4, 5, 6]
    assert max(r["version/rollout_max"] for r in train) >= 3
    in_flight = [r["weight/in_flight_at_reload"] for r in train]
    if mode == "batch-async":
        assert in_flight == [0.0] * 6  # reloads wait for in-flight rollouts
    else:
        assert sum(in_flight) > 0  # weights pushed while rollouts were running
    pairs = delivered_pairs(out)
    assert len(pairs) == 6 * 32 and len(set(pairs)) == len(pairs)


def test_evaluator_that_raises_counts_errors_and_the_run_goes_on(tmp_path: Path) -> None:
    evaluator = tmp_path / "flaky_evaluator.py"
    evaluator.write_text(
        "from nexrl.rollout_worker import EvaluationRunResult, Evaluator\n"
        "class Flaky(Evaluator):\n"
        "    def evaluate(self, data, evaluation_target):\n"
        "        if int(data['answer']) % 2:\n"
        "            raise RuntimeError('odd answers break this evaluator')\n"
        "        words = evaluation_target.final_answer.split()\n"
        "        ok = bool(words) and words[0] == str(data['answer'])\n"
        "        return EvaluationRunResult(reward=1.0 if ok else 0.0)\n"
    )
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(out, f"rollout_worker.evaluator={evaluator}:Flaky", steps=2),
    )
    assert Controller(recipe, progress=False).run().steps == 2
    ds = pool_of(out).to_xarray()
    errors = ds["metric_evaluator_error"].values
    odd = np.array([int(a) % 2 == 1 for a in _answers(ds["group_id"].values)])
    assert odd.any() and (~odd).any()
    assert (errors == odd).all()  # exactly the trajectories whose evaluator raised
    assert (ds["reward"].values[odd] == 0).all()
    assert train_rows(out)[-1]["rollout/evaluator_errors"] == odd.sum()


def _answers(group_ids: np.ndarray) -> list[str]:
    """The answer of each trajectory's prompt: group_id = epoch * len(data) + row."""
    rows = [json.loads(line) for line in Path(DATA).read_text().splitlines()]
    return [str(rows[int(g) % len(rows)]["answer"]) for g in group_ids]


def test_hung_evaluator_is_cancelled_and_named(tmp_path: Path) -> None:
    evaluator = tmp_path / "slow_evaluator.py"
    evaluator.write_text(
        "import time\n"
        "from nexrl.rollout_worker import EvaluationRunResult, Evaluator\n"
        "class Hangs(Evaluator):\n"
        "    def evaluate(self, data, evaluation_target):\n"
        "        time.sleep(3600)\n"
        "        return EvaluationRunResult(reward=0.0)\n"
    )
    from nexrl.driver.controller import ControllerError

    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"rollout_worker.evaluator={evaluator}:Hangs",
            "runtime_monitor.task_timeout_s=30",  # rollouts finish well within it, even on a busy machine
            "runtime_monitor.max_task_failures=0",
            "runtime_monitor.wait_notice_s=10",
        ),
    )
    with pytest.raises(ControllerError) as err:
        Controller(recipe, progress=False).run()
    message = str(err.value)
    assert "evaluator future evaluate-g" in message
    assert "task_timeout_s=30" in message and "max_task_failures=0" in message
    # while it hung, the run said what it waited for and what would end it
    log = (out / "logs" / "driver.log").read_text()
    waiting = [line for line in log.splitlines() if "step 1: waiting " in line]
    assert waiting, log[-3000:]
    assert "for a batch: 32 trajectories in flight, 0 of 32 ready in the pool" in waiting[0]
    assert "runtime_monitor.task_timeout_s=30 is cancelled and retried" in waiting[0]
    assert processes_using(out) == []
