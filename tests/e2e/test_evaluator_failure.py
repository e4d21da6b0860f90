"""Evaluator metrics reach metrics.jsonl; a run whose evaluator fails on every sample stops.

The default recipe's evaluator reports ``answered_a_digit``: its per-step mean is
``eval/answered_a_digit``. An evaluator that reads a data field it did not declare
in ``required_fields`` (so ``--check`` cannot see that the data lacks it: a
declared one is caught before the run starts, tests/unit/config/test_check_task_code.py)
raises KeyError on every sample: the run stops with a non-zero exit naming the
evaluator, the exception and the first failing row, after
``rollout_worker.max_evaluator_error_steps`` steps, or at the end of a shorter run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nexrl.driver.controller import Controller, ControllerError
from nexrl.driver.recipe import load_recipe_checked
from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, read_rows, subprocess_env, train_rows

EVALUATOR = """
from nexrl.rollout_worker import EvaluationRunResult, Evaluator


class SolutionEvaluator(Evaluator):  # reads 'solution', which the data does not have
    def evaluate(self, data, evaluation_target):
        return EvaluationRunResult(reward=float(evaluation_target.final_answer == data["solution"]))
"""


def _evaluator_of_a_missing_field(tmp_path: Path) -> str:
    path = tmp_path / "solution_evaluator.py"
    path.write_text(EVALUATOR)
    return f"rollout_worker.evaluator={path}:SolutionEvaluator"


def test_evaluator_metrics_are_in_the_metrics_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE, overrides(out, "validate.validate_before_train=true", "validate.every=2", steps=3)
    )
    assert Controller(recipe, progress=False).run().steps == 3
    rows = train_rows(out)
    assert len(rows) == 3
    # one row per step: the final policy's validation (step 3, not a multiple of 2) is in
    # the last step's row
    assert [r["step"] for r in read_rows(out)] == [0, 1, 2, 3]
    for row in rows:
        assert 0.0 <= row["eval/answered_a_digit"] <= 1.0
        assert row["eval/evaluator_error"] == 0.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluator_errors"] == 0
    # validation rows carry every evaluator metric too, as val/eval/<name>
    val = [r for r in read_rows(out) if "val/reward/mean" in r]
    assert [r["step"] for r in val] == [0, 2, 3]
    for row in val:
        assert 0.0 <= row["val/eval/answered_a_digit"] <= 1.0
        assert row["val/eval/evaluator_error"] == 0.0
    assert summary["val_eval_last"] == {
        "answered_a_digit": val[-1]["val/eval/answered_a_digit"],
        "evaluator_error": 0.0,
    }


def test_evaluator_failing_on_every_sample_stops_after_n_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            _evaluator_of_a_missing_field(tmp_path),
            "rollout_worker.max_evaluator_error_steps=2",
            steps=4,
        ),
    )
    with pytest.raises(ControllerError) as err:
        Controller(recipe, progress=False).run()
    msg = str(err.value)
    assert "SolutionEvaluator" in msg
    assert "KeyError" in msg and "'solution'" in msg
    assert "first failing row" in msg and '"prompt": "max' in msg
    assert "max_evaluator_error_steps=2" in msg
    rows = train_rows(out)  # what was written before the stop is whole
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["eval/evaluator_error"] == 1.0 for r in rows)
    assert all(r["reward/mean"] == 0.0 for r in rows)
    assert len(read_rows(out)) == len((out / "metrics.jsonl").read_text().splitlines())


def test_short_run_of_only_errors_exits_non_zero(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *overrides(out, _evaluator_of_a_missing_field(tmp_path), steps=2),  # shorter than N=3
        "validate.validate_before_train=true",  # the validation's errors are seen too
    ]
    proc = _launch.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    stop = [line for line in proc.stderr.splitlines() if line.startswith("error: the run stopped")]
    assert len(stop) == 1, proc.stderr[-3000:]
    assert "SolutionEvaluator" in stop[0] and "KeyError" in stop[0]
    # 64 failed samples: each in a worker's log file, once per worker on the terminal
    warned = [
        line
        for line in proc.stderr.splitlines()
        if line.startswith("nexrl.rollout.worker.base - WARNING - evaluator SolutionEvaluator")
    ]
    per_worker = [p.read_text() for p in sorted((out / "logs").glob("dask-worker-*.log"))]
    # one line for each worker that logged any (its log file says which), then that
    # worker's count at its 10th failure (each worker saw at least 10 of the 64)
    first = [w for w in warned if "shown once per kind" in w]
    counted = [w for w in warned if "the same kind 10 times so far" in w]
    assert len(first) == sum("SolutionEvaluator failed" in t for t in per_worker) >= 1, proc.stderr[
        -3000:
    ]
    assert len(counted) <= len(first) and len(first) + len(counted) == len(warned), warned
    assert "Traceback" not in proc.stderr
    # every data row could not be evaluated: the first 3 named on the terminal, then one
    # line for the rest, each of which is named in logs/driver.log
    rows_lines = [
        x for x in proc.stderr.splitlines() if " ERROR " in x and "could not be evaluated" in x
    ]
    assert len(rows_lines) == 4, proc.stderr[-3000:]
    assert "recipes/max_digit/data/train.jsonl, line " in rows_lines[0]
    # nothing was ever scored: each line says the evaluator is the first suspect
    assert all("as on every row so far: look at the evaluator first" in x for x in rows_lines[:3])
    assert "validation evaluator metrics" not in proc.stderr  # only evaluator_error: not one
    assert "more data rows could not be evaluated" in rows_lines[3]
    assert "data rows that could not be evaluated (every sample an evaluator error): " in (
        proc.stderr
    )
    named = (out / "logs" / "driver.log").read_text().count("could not be evaluated: the")
    assert named == json.loads((out / "summary.json").read_text())["rows_not_evaluated"] >= 8
    logged = "".join(per_worker)
    val = [r for r in read_rows(out) if "val/evaluator_errors" in r]
    assert val and val[0]["step"] == 0 and val[0]["val/evaluator_errors"] == 49  # every prompt
    val_errors = sum(int(r["val/evaluator_errors"]) for r in val)
    assert logged.count("SolutionEvaluator failed on data row {") == 64 + val_errors
    # each with its traceback, down to the evaluator's own line
    assert logged.count("in evaluate\n    return EvaluationRunResult(reward=float(") >= 64
    assert (
        "validation at step 0: reward 0.000 (49 samples; 49 evaluator errors, scored 0: "
        "see logs/dask-worker-*.log)"
    ) in proc.stderr
    assert [r["step"] for r in train_rows(out)] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluator_errors"] == 64 and summary["evaluator_error_share"] == 1.0
    assert "evaluator errors: 64 (100.0% of trained samples); each one is in logs/dask-worker-" in (
        proc.stderr
    )
    # The same command again: the run is at its last step, and it still never exits 0.
    again = _launch.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stderr[-3000:]
    (line,) = [x for x in again.stderr.splitlines() if x.startswith("error:")]
    assert "finished at step 2 having trained on nothing but evaluator errors" in line
    assert "Traceback" not in again.stderr
