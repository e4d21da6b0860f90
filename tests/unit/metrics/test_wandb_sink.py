"""The wandb sink, offline (WANDB_MODE=offline): the run files it writes hold every
metric per step and the recipe; a resume continues the same run id; the API key in
the environment is never written to the run folder."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nexrl.driver.metrics import MetricsTracker, read_metrics

KEY = "a1b2c3d4e5f6a7b8c9d0a1b2c3d4e5f6a7b8c9d0"  # the shape of a W&B API key
RECIPE = {"project_name": "unit", "trainer": {"lr": 0.003}}


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a ``.wandb`` offline run file: a 7-byte header (``:W&B``, magic,
    version), then LevelDB-log blocks of 32 KiB holding chunks (crc32, length, type) of
    protobuf ``Record`` messages."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, record = 7, 32 * 1024, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        record = (b"" if kind in (1, 2) else record) + data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, last
            message = pb.Record()  # type: ignore[attr-defined]  # generated, no stub
            message.ParseFromString(record)
            yield message


def history(out: Path, run_id: str) -> tuple[dict[int, dict[str, Any]], list[str], dict[str, Any]]:
    """Each step's logged values across the offline run files of ``run_id``, the ids of
    the runs those files name, and the run's config."""
    steps: dict[int, dict[str, Any]] = {}
    ids = []
    config: dict[str, Any] = {}
    for path in sorted(out.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        for rec in wandb_records(path):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                ids.append(rec.run.run_id)
                config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
            elif kind == "config":
                config.update({i.key: json.loads(i.value_json) for i in rec.config.update})
            elif kind == "history":
                items = {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in rec.history.item
                }
                steps[rec.history.step.num] = {
                    k: v for k, v in items.items() if not k.startswith("_")
                }
    return steps, ids, config


def test_offline_run_files_hold_every_metric_and_a_resume_continues_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    with MetricsTracker(["wandb"], out, run_name="r", config=RECIPE) as tracker:
        tracker.log(1, {"reward/mean": 0.25, "actor/pg_loss": -0.5})
        tracker.log(2, {"reward/mean": 0.5, "actor/pg_loss": -0.125})
    run_id = json.loads((out / "wandb_run.json").read_text())["run_id"]
    # wandb names an offline run's folder by its start time to the second: a resume
    # started within the same second as the first start (only here, never in a real
    # run, whose start takes seconds) would write into the first one's folder
    time.sleep(1.0)
    with MetricsTracker(["wandb"], out, run_name="r", config=RECIPE, resume_step=2) as tracker:
        tracker.log(3, {"reward/mean": 0.75, "actor/pg_loss": -0.25})
    assert json.loads((out / "wandb_run.json").read_text())["run_id"] == run_id

    steps, ids, config = history(out, run_id)
    assert ids == [run_id, run_id]  # two starts (files), one run
    rows = read_metrics(out / "metrics.jsonl")
    assert steps == {
        r["step"]: {k: v for k, v in r.items() if k not in ("step", "time", "time/running_s")}
        for r in rows
    }
    assert config["trainer"] == {"lr": 0.003}  # the recipe is the run's config
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_wandb_says_one_line_of_where_the_run_is_and_nothing_else(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """W&B's own lines (its init notes, an ad for its tracing library when ``openai`` is
    imported, as in every run, the history and summary tables at the end: ~35 lines)
    stay off the terminal; one line says where the offline run is and how to upload it."""
    import logging

    import openai  # noqa: F401  # what makes W&B print its ad

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.delenv("WANDB_DISABLE_WEAVE", raising=False)
    out = tmp_path / "run"
    capfd.readouterr()
    with (
        caplog.at_level(logging.INFO, logger="nexrl.driver.metrics"),
        MetricsTracker(["wandb"], out, run_name="r", config=RECIPE) as tracker,
    ):
        tracker.log(1, {"reward/mean": 0.25})
    said = capfd.readouterr()
    assert "wandb" not in (said.out + said.err).lower(), said
    run_id = json.loads((out / "wandb_run.json").read_text())["run_id"]
    (folder,) = out.glob(f"wandb/offline-run-*-{run_id}")
    assert (
        f"W&B: offline run {run_id} (project unit) in {folder}; upload it with: wandb sync {folder}"
    ) in caplog.text
