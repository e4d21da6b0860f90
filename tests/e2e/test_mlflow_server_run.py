"""Runs of the default recipe logging to a real ``mlflow server`` (sqlite backend,
artifacts in a temp folder) started here on 127.0.0.1, read back with the MLflow client:

* the metric history of every metric equals metrics.jsonl; the recipe is the run's
  params; the reward curve, config.yaml and summary.json are its artifacts; a resume
  continues the same MLflow run;
* the server killed mid-run costs one warning: the run finishes, metrics.jsonl has
  every step.

The killed-server test is last: it kills the module's server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, read_rows, subprocess_env


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = (root / "server.log").open("wb")
    proc = _launch.Popen(
        [
            sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", str(root / "artifacts"),
        ],
        env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # ~50 s on a busy 2-core machine
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "mlflow server not up in 300 s"
            time.sleep(1)
        yield Server(url, proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()


def train(out: Path, server: Server, steps: int) -> subprocess.Popen[str]:
    return _launch.Popen(
        [
            sys.executable, "-m", "nexrl.driver.cli.train", RECIPE,
            *overrides(out, "logger.backends=[jsonl,mlflow]", "project_name=nexrl_e2e",
                       f"logger.mlflow_tracking_uri={server.url}", steps=steps),
        ],
        env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> str:
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    return err


def test_metrics_params_and_files_read_back_and_a_resume_continues_the_run(
    tmp_path: Path, server: Server
) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    finish(train(out, server, steps=1))
    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]
    finish(train(out, server, steps=2))  # resumed: step 1 kept, step 2 added
    assert json.loads((out / "mlflow_run.json").read_text())["run_id"] == run_id

    client = MlflowClient(tracking_uri=server.url)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([run.info.experiment_id])) == 1
    assert client.get_experiment(run.info.experiment_id).name == "nexrl_e2e"
    rows = read_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    keys = {k for r in rows for k in r} - {"step", "time", "time/running_s"}
    assert "reward/mean" in keys and set(run.data.metrics) == keys
    for key in sorted(keys):
        expected = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        got = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert got == expected, key
    assert run.data.params["trainer.micro_batch_size"] == "32"
    assert run.data.params["output_dir"] == str(out)
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"reward_curve.png", "config.yaml", "summary.json"} <= names
    summary = client.download_artifacts(run_id, "summary.json", str(tmp_path))
    assert Path(summary).read_text() == (out / "summary.json").read_text()


def test_server_killed_mid_run_costs_one_warning_not_the_run(
    tmp_path: Path, server: Server
) -> None:
    out = tmp_path / "run"
    steps = 3
    proc = train(out, server, steps=steps)
    deadline = time.monotonic() + 600
    while not read_rows(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    killed_at = len(read_rows(out))
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    if not 1 <= killed_at < steps:
        proc.kill()
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"the server was not killed mid-run ({killed_at} rows): {err[-3000:]}")
    err = finish(proc)
    assert [r["step"] for r in read_rows(out)] == list(range(1, steps + 1))
    driver_log = (out / "logs" / "driver.log").read_text()
    assert driver_log.count("metric sink 'mlflow' failed") == 1, driver_log[-3000:]
    assert err.count("metric sink 'mlflow' failed") <= 1
    assert (out / "summary.json").exists()
