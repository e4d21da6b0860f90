"""The mlflow sink with its default store (a sqlite database in the run folder, no
server): params, every metric per step, the end files, a resume continuing the run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nexrl.driver.metrics import MetricsTracker, read_metrics

RECIPE = {"project_name": "unit", "trainer": {"lr": 0.003, "total_train_steps": 3}, "x": [1, 2]}


def history(client: object, run_id: str, key: str) -> list[tuple[int, float]]:
    got = client.get_metric_history(run_id, key)  # type: ignore[attr-defined]
    return sorted((m.step, m.value) for m in got)


def test_default_store_in_run_folder_records_params_metrics_files_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    with MetricsTracker(["mlflow"], out, run_name="r", config=RECIPE) as tracker:
        tracker.log(1, {"reward/mean": 0.25, "actor/pg_loss": -0.5})
        tracker.log(2, {"reward/mean": 0.5, "actor/pg_loss": math.nan})
    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]

    # resumed from the checkpoint of step 2 with a changed recipe value
    (out / "summary.json").write_text('{"steps": 3}\n')
    changed = {**RECIPE, "trainer": {"lr": 0.003, "total_train_steps": 4}}
    with MetricsTracker(["mlflow"], out, run_name="r", config=changed, resume_step=2) as tracker:
        tracker.log(3, {"reward/mean": 0.75, "actor/pg_loss": -0.25})
        tracker.log_artifacts([out / "summary.json", out / "absent.png"])
        assert tracker.active == ["jsonl", "mlflow"]
    assert json.loads((out / "mlflow_run.json").read_text())["run_id"] == run_id

    client = MlflowClient(tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([run.info.experiment_id])) == 1  # continued, not a second
    assert client.get_experiment(run.info.experiment_id).name == "unit"
    assert run.data.params["trainer.lr"] == "0.003"
    assert run.data.params["x"] == "[1, 2]"
    assert run.data.params["trainer.total_train_steps"] == "3"  # params are the first start's
    rows = read_metrics(out / "metrics.jsonl")
    for key in ("reward/mean", "actor/pg_loss"):
        expected = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        assert history(client, run_id, key) == expected
    assert [a.path for a in client.list_artifacts(run_id)] == ["summary.json"]
    local = client.download_artifacts(run_id, "summary.json", str(tmp_path))
    assert Path(local).read_text() == '{"steps": 3}\n'
    assert str(out.resolve() / "mlartifacts") in run.info.artifact_uri


def test_a_fresh_run_in_the_folder_starts_a_new_mlflow_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with MetricsTracker(["mlflow"], tmp_path, run_name="r", config=RECIPE) as tracker:
        tracker.log(1, {"reward/mean": 0.25})
    first = json.loads((tmp_path / "mlflow_run.json").read_text())["run_id"]
    with MetricsTracker(["mlflow"], tmp_path, run_name="r", config=RECIPE) as tracker:
        tracker.log(1, {"reward/mean": 0.5})
    assert json.loads((tmp_path / "mlflow_run.json").read_text())["run_id"] != first
