"""docs/train-your-own-task.md's training run, as the guide writes it: the scaffold,
the data script, the training command (run as ``python -m nexrl.driver.cli.train``, which
is what the ``./pants run`` target runs, with a free dashboard port so parallel
tests do not collide) and the guide's Python block that reads the results.

The guide promises: 100 steps, the 5-step mean reward from about 0.1 to about 0.65
(measured 0.09 -> 0.65; runs of the recipe repeat to the digit), ``eval/exact``
with it, everything in ``runs/next_digit/``. The unit tier
(tests/unit/docs/test_train_your_own_task.py) checks the scaffold and ``--check``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from tests import _launch
from tests._guide import TRAIN, commands, guide_blocks, task
from tests.e2e._recipe import subprocess_env

__all__ = ["task"]  # the fixture: scaffold + data script in a scratch folder

# sys.path made absolute now, before the fixture changes directory (a Pants sandbox
# puts relative source roots on it): what the child processes import nexrl from.
IMPORT_PATH = os.pathsep.join(os.path.abspath(p) for p in sys.path)


def test_the_guides_run_learns_and_its_python_reads_the_results(task: Path) -> None:
    (run,) = [c for c in commands(TRAIN) if c.endswith("next_digit.yaml")]
    args = shlex.split(run[len(TRAIN) :])
    env = {**subprocess_env(), "PYTHONPATH": IMPORT_PATH}
    proc = _launch.run(
        [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            *args,
            "cluster.dashboard_address=127.0.0.1:0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The first lines name what was loaded, as the guide shows.
    assert (
        "rollout worker: built-in type 'simple' (rollout_worker.type); evaluator: TaskEvaluator ("
        in (proc.stderr)
    )

    out = Path("runs/next_digit")
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["steps_run"], summary["first_step"], summary["last_step"]) == (100, 1, 100)
    assert summary["reward_first5_mean"] < 0.2, summary  # "about 0.1"
    assert summary["reward_last5_mean"] > 0.55, summary  # "about 0.65"
    for name in ("metrics.jsonl", "plots/reward_curve.png", "pool.zarr", "logs/driver.log"):
        assert (out / name).exists(), name

    # The guide's "Read the results" block, as written, in the same folder.
    (reader,) = [b for b in guide_blocks("python") if "read_pool" in b]
    shown = _launch.run(
        [sys.executable, "-c", reader], env=env, capture_output=True, text=True, timeout=300
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    reward, exact, last_step_reward, last_exact = shown.stdout.splitlines()
    train = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]
    train = [r for r in train if "reward/mean" in r]
    assert reward == f"reward {train[0]['reward/mean']} -> {train[-1]['reward/mean']}"
    assert exact == f"exact {train[0]['eval/exact']} -> {train[-1]['eval/exact']}"
    # The pool's trained rows of the last step average to that step's reward/mean.
    assert abs(float(last_step_reward) - train[-1]["reward/mean"]) < 1e-6
    assert last_exact.startswith("[") and len(last_exact.strip("[]").split()) == 5


def test_the_guides_custom_worker_trains_full_batches(task: Path) -> None:
    """§5's worker (a second try when the first answer is no digit, only the scored answer
    trained) with §4's recipe and the guide's command: each episode gives the pool one
    trajectory, so groups of ``group_size`` fill and every step trains 64 of them."""
    (worker,) = [b for b in guide_blocks("python") if "class TaskWorker" in b]
    (task / "worker.py").write_text(worker)
    (check,) = [c for c in commands(TRAIN) if "custom_worker=" in c]
    args = [a for a in shlex.split(check[len(TRAIN) :]) if a != "--check"]
    env = {**subprocess_env(), "PYTHONPATH": IMPORT_PATH}
    proc = _launch.run(
        [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            *args,
            "trainer.total_train_steps=3",
            "validate.validate_before_train=false",
            "cluster.dashboard_address=127.0.0.1:0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # before the fix this run waited for its groups until the 600 s timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TaskWorker" in proc.stderr
    rows = [json.loads(r) for r in Path("runs/next_digit/metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["batch/size"] for r in train] == [64.0, 64.0, 64.0]
    assert all(r["batch/num_groups"] == 8.0 for r in train)
