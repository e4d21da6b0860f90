"""Per-step evaluator metrics and the evaluator failure policy, on pool columns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.core.types.trajectory import Trajectory
from nexrl.driver.controller.evaluator_stats import (
    EvaluatorFailurePolicy,
    evaluator_metrics,
    first_error,
)
from nexrl.driver.metrics import summarize
from nexrl.driver.metrics.progress import _fields
from nexrl.driver.metrics.summary import format_summary


def _traj(i: int, metrics: dict[str, float], error: str | None = None) -> Trajectory:
    return Trajectory(
        [1, 2],
        [3],
        [1],
        [0.0],
        0.0,
        group_id=i // 2,
        run_id=i % 2,
        metrics=metrics,
        extra_info={"evaluator_error": error} if error else {},
        data_item={"prompt": f"row {i}", "long": "x" * 1000},
    )


def _cols(trajs: list[Trajectory]) -> TrajectoryColumns:
    return TrajectoryColumns.from_trajectories(trajs)


def test_means_per_metric_over_the_batch() -> None:
    cols = _cols(
        [
            _traj(0, {"acc": 1.0, "len": 4.0, "evaluator_error": 0.0, "response_length": 3.0}),
            _traj(1, {"acc": 0.0, "len": 2.0, "evaluator_error": 0.0}),
            _traj(2, {"acc": 0.5, "evaluator_error": 0.0}),  # no "len": not averaged in
            _traj(3, {"evaluator_error": 1.0}, "KeyError: 'answer'"),
        ]
    )
    # the controller's path: the pool's columns, reordered/taken, then aggregated
    trained = cols.take(np.array([3, 2, 1, 0]))
    got = evaluator_metrics(trained)
    assert got == {
        "eval/acc": pytest.approx(0.5),  # (1 + 0 + 0.5) / 3
        "eval/evaluator_error": pytest.approx(0.25),  # 1 of 4 samples
        "eval/len": pytest.approx(3.0),  # (4 + 2) / 2
    }
    found = first_error(trained)
    assert found is not None
    error, row = found
    assert error == "KeyError: 'answer'"
    assert '"prompt": "row 3"' in row and row.endswith("...") and len(row) <= 303


def test_no_metrics_no_errors() -> None:
    cols = _cols([_traj(0, {}), _traj(1, {})])
    assert evaluator_metrics(cols) == {}
    assert first_error(cols) is None


def _all_fail(n: int = 2) -> TrajectoryColumns:
    return _cols([_traj(i, {"evaluator_error": 1.0}, "KeyError: 'answer'") for i in range(n)])


def _ok() -> TrajectoryColumns:
    return _cols([_traj(0, {"evaluator_error": 1.0}, "E: x"), _traj(1, {"evaluator_error": 0.0})])


def test_policy_stops_after_n_consecutive_all_error_steps() -> None:
    policy = EvaluatorFailurePolicy(3, "ev.py:MyEval")
    assert policy.observe(_all_fail()) is None
    assert policy.observe(_all_fail()) is None
    assert policy.observe(_ok()) is None  # a step with one success resets the streak
    assert policy.observe(_all_fail()) is None
    assert policy.observe(_all_fail()) is None
    msg = policy.observe(_all_fail())
    assert msg is not None
    assert "ev.py:MyEval" in msg and "KeyError: 'answer'" in msg and "row 0" in msg
    assert "3 consecutive" in msg and "\n" not in msg
    assert policy.check_finished() is None  # one step had a success


def test_short_run_of_only_errors_fails_at_the_end() -> None:
    policy = EvaluatorFailurePolicy(3, "ev.py:MyEval")
    assert policy.observe(_all_fail()) is None
    assert policy.observe(_all_fail()) is None
    msg = policy.check_finished()
    assert msg is not None and "ev.py:MyEval" in msg
    assert EvaluatorFailurePolicy(3, "e").check_finished() is None  # no step: nothing to say


def test_zero_never_stops_early() -> None:
    policy = EvaluatorFailurePolicy(0, "e")
    for _ in range(5):
        assert policy.observe(_all_fail()) is None
    assert policy.check_finished() is not None


def test_progress_and_summary_show_them() -> None:
    row = {
        "reward/mean": 0.5,
        "eval/acc": 0.75,
        "eval/evaluator_error": 0.25,
        "eval/len": 3.0,
    }
    assert _fields(row) == [
        ("reward", "0.500"),
        ("acc", "0.75"),
        ("len", "3"),
        ("eval_errors", "25%"),
    ]
    assert ("eval_errors", "0%") not in _fields({**row, "eval/evaluator_error": 0.0})
    rows = [
        {
            "step": 1,
            "reward/mean": 0.0,
            "rollout/evaluator_errors": 8,
            "eval/evaluator_error": 0.25,
        },
        {
            "step": 2,
            "reward/mean": 0.0,
            "rollout/evaluator_errors": 24,
            "eval/evaluator_error": 0.5,
        },
    ]
    s = summarize(rows)
    assert s["evaluator_errors"] == 24
    assert s["evaluator_error_share"] == pytest.approx(0.375)
    assert "evaluator errors: 24 (37.5% of trained samples)" in format_summary(s)
    assert "evaluator errors" not in format_summary(summarize([{"step": 1, "reward/mean": 1.0}]))
    assert not math.isnan(s["evaluator_error_share"])
