"""End-to-end: the default recipe with ``trainer.mode=training-service``, the service
started by the run (a Dask actor) and by its command (``python -m nexrl training-service``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows


def _check_run(out: Path, steps: int) -> dict[str, Any]:
    train = train_rows(out)
    assert [r["step"] for r in train] == list(range(1, steps + 1))
    for r in train:
        assert r["version/trainer"] == r["version/inference"] == r["step"]
        assert r["version/rollout_min"] == r["step"] - 1  # sync: rollouts of the last weights
        assert r["actor/grad_norm"] > 0 and "actor/pg_loss" in r
        assert 0.0 <= r["reward/mean"] <= 1.0
    snap = latest_snapshot(out / "snapshots")
    assert snap is not None and snap[0] == steps
    ckpt = CheckpointManager(out / "checkpoints").latest()
    assert ckpt is not None and ckpt.name == f"step_{steps}"
    record: dict[str, Any] = json.loads((out / "cluster.json").read_text())
    return record


def test_a_run_in_training_service_mode_trains_writes_metrics_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(RECIPE, overrides(out, "trainer.mode=training-service", steps=3))
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (3, None)
    record = _check_run(out, 3)
    (rank,) = record["trainer_ranks"]
    assert rank["service_url"].startswith("http://127.0.0.1:")

    # resumed for one more step: a new service resumes from the run's checkpoint
    more = load_recipe_checked(RECIPE, overrides(out, "trainer.mode=training-service", steps=4))
    assert Controller(more, progress=False).run().steps == 4
    _check_run(out, 4)  # steps 1-4 once each; step 4 sampled by the resumed v3


def test_a_run_against_a_service_started_by_its_command(tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = overrides(out, "trainer.mode=training-service", steps=2)
    command = [sys.executable, "-m", "nexrl", "training-service", RECIPE, *settings, "--port=0"]
    log = tmp_path / "service.log"
    with log.open("w") as sink:
        service = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=subprocess_env()
        )
    try:
        url, deadline = "", time.monotonic() + 600  # a hang guard: it builds the model first
        while not url and service.poll() is None and time.monotonic() < deadline:
            found = re.search(r"nexrl training service: (http://\S+)", log.read_text())
            url = found.group(1) if found else ""
            time.sleep(0.5)
        assert url, f"no URL from the service (exit {service.poll()}): {log.read_text()[-2000:]}"
        recipe = load_recipe_checked(RECIPE, [*settings, f"trainer.service_url={url}"])
        result = Controller(recipe, progress=False).run()
        assert (result.steps, result.stopped_by) == (2, None)
        record = _check_run(out, 2)
        (rank,) = record["trainer_ranks"]
        assert rank["service_url"] == url
    finally:
        service.terminate()
        assert service.wait(timeout=60) == 0
