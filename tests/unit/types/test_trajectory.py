"""Trajectory: validation names the bad field; the pool record round-trips."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from nexrl.core.types import Trajectory, TrajectoryError


def _kwargs(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "prompt_ids": [5, 6, 7],
        "response_ids": [8, 9],
        "loss_mask": [1, 0],
        "logprobs": [-0.5, -1.25],
        "reward": 1.0,
        "group_id": 12,
    }
    base.update(over)
    return base


def test_record_round_trip_keeps_every_field() -> None:
    traj = Trajectory(
        **_kwargs(
            run_id=3,
            policy_version=7,
            metrics={"acc": 1.0, "len": 2},
            extra_info={"turns": [1, 2], "tool": "calc"},
            data_item={"prompt": [{"role": "user", "content": "hi"}], "answer": "9"},
        )
    )
    record = traj.to_record()
    assert set(record) == {"ragged", "scalars", "meta"}
    assert record["ragged"]["prompt_ids"].dtype == np.int32
    assert record["ragged"]["loss_mask"].dtype == np.int8
    assert record["ragged"]["logprobs"].dtype == np.float32
    assert record["scalars"]["group_id"].dtype == np.int64
    assert isinstance(record["meta"], str)
    # The meta string survives a JSON round trip on its own (it is stored as text).
    record["meta"] = json.loads(json.dumps(record["meta"]))

    back = Trajectory.from_record(record)
    assert back == traj
    assert back.metrics == {"acc": 1.0, "len": 2.0}


def test_record_round_trip_of_fractional_logprobs_is_float32_exact() -> None:
    traj = Trajectory(**_kwargs(logprobs=[-0.1, -2.0 / 3.0]))
    back = Trajectory.from_record(traj.to_record())
    assert back.logprobs == [float(np.float32(-0.1)), float(np.float32(-2.0 / 3.0))]


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"response_ids": [], "loss_mask": [], "logprobs": []}, "response_ids"),
        ({"prompt_ids": []}, "prompt_ids"),
        ({"loss_mask": [1]}, "loss_mask"),
        ({"logprobs": [-0.1, -0.2, -0.3]}, "logprobs"),
        ({"loss_mask": [1, 2]}, "loss_mask"),
        ({"reward": float("nan")}, "reward"),
        ({"logprobs": [-0.1, 0.5]}, "logprobs"),
        ({"logprobs": [-0.1, float("-inf")]}, "logprobs"),
        ({"prompt_ids": [1, -2]}, "prompt_ids"),
        ({"response_ids": [1, 2.5]}, "response_ids"),
        ({"metrics": {"acc": "high"}}, "metrics['acc']"),
        ({"metrics": {"ok": True}}, "metrics['ok']"),
    ],
)
def test_validation_error_names_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(TrajectoryError) as info:
        Trajectory(**_kwargs(**over))
    assert str(info.value).startswith(field)


def test_numpy_token_ids_are_accepted() -> None:
    traj = Trajectory(**_kwargs(prompt_ids=list(np.array([1, 2], dtype=np.int32))))
    assert traj.num_tokens == 4


def test_malformed_record_is_a_trajectory_error() -> None:
    record = Trajectory(**_kwargs()).to_record()
    del record["ragged"]["logprobs"]
    with pytest.raises(TrajectoryError, match="malformed trajectory record"):
        Trajectory.from_record(record)
    bad_meta = Trajectory(**_kwargs()).to_record()
    bad_meta["meta"] = "{not json"
    with pytest.raises(TrajectoryError, match="malformed"):
        Trajectory.from_record(bad_meta)


def test_record_with_invalid_values_fails_validation_on_load() -> None:
    record = Trajectory(**_kwargs()).to_record()
    record["ragged"]["loss_mask"] = np.array([1, 3], dtype=np.int8)
    with pytest.raises(TrajectoryError, match=r"^loss_mask"):
        Trajectory.from_record(record)


def test_an_evaluation_result_with_a_metric_that_is_no_number_is_refused() -> None:
    """Refused where the evaluator builds it: an evaluator error for its sample (scored
    0, counted), not a trajectory that fails its whole group later."""
    from nexrl.core.types.episode import EvaluationRunResult

    metrics: dict[str, Any] = {"a": 1, "b": np.float32(0.5), "c": 2.0}  # numpy, as evaluators do
    ok = EvaluationRunResult(reward=1.0, metrics=metrics)
    assert ok.metrics["b"] == 0.5
    for bad in (True, "1.0", None, [1.0]):
        with pytest.raises(TypeError, match=r"metrics\['m'\] must be a float"):
            EvaluationRunResult(reward=1.0, metrics={"m": bad})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"metrics must be a dict"):
        EvaluationRunResult(reward=1.0, metrics=[("m", 1.0)])  # type: ignore[arg-type]


def test_a_reward_is_any_real_number_but_a_bool() -> None:
    """A numpy float from a scorer (``np.mean``, a similarity) was refused ("must be a
    float, got np.float32(1.0)"): every sample an evaluator error."""
    from nexrl.core.types.episode import EvaluationRunResult

    for good, value in (
        (np.float32(0.5), 0.5),
        (np.float64(0.25), 0.25),
        (1, 1.0),
        (np.int64(0), 0.0),
    ):
        result = EvaluationRunResult(reward=good)  # type: ignore[arg-type]
        assert type(result.reward) is float and result.reward == value
    with pytest.raises(
        TypeError, match=r"reward must be a float, got True \(a bool: wrap it in float\(\)\)"
    ):
        EvaluationRunResult(reward=True)
    for bad in ("1.0", None, np.array([1.0])):
        with pytest.raises(TypeError, match=r"reward must be a float"):
            EvaluationRunResult(reward=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"reward must be finite"):
        EvaluationRunResult(reward=np.float32("nan"))  # type: ignore[arg-type]
