"""Faults against a REAL vLLM (vLLM 0.32.0's CPU build, see ``tests/e2e/_vllm.py``),
each through ``nexrl train`` as a user runs it: a reload vLLM refuses (a snapshot torn
on its way) stops the run in one line and the same command resumes; a vLLM slower to
start than its timeout, or one that exits at start, stops the run in one line naming
the setting or vLLM's own error, nothing of vLLM left running."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from tests.e2e._recipe import train_rows
from tests.e2e._vllm import (
    RECIPE,
    assert_real_vllm,
    error_line,
    group_gone,
    processes_logging_to,
    train_cli,
)
from tests.e2e.test_kill_and_resume import assert_pool_record_matches

TORN = "tests/e2e/_torn_snapshot_vllm.py:TornSnapshotVLLM"


def test_a_reload_vllm_refuses_stops_the_run_naming_it_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    """Snapshot v2 is torn on its way to vLLM (``_torn_snapshot_vllm.py``: half its
    safetensors file gone) and vLLM refuses to load it. The run stops with one line
    naming the snapshot, vLLM's reason and how to resume, step 2 kept (trained,
    logged and checkpointed); the same command resumes from step 2, republishes the
    torn snapshot from the trainer's checkpoint, starts vLLM on it and trains steps
    3-4: each step and each group once."""
    out = tmp_path / "run"
    steps = 4
    first = train_cli(out, f"service.inference_service.backend={TORN}", steps=steps)
    assert first.returncode != 0, first.stderr[-3000:]
    error = error_line(first)
    assert "the vllm server refused snapshot v2 (" in error, error
    assert "Error while deserializing header" in error, error  # vLLM's own reason
    assert "the snapshot is damaged: " in error and "model.safetensors" in error, error
    assert "step 2 trained and is checkpointed: run the same command again" in error, error
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2], rows
    assert processes_logging_to(out / "logs" / "inference.log") == []
    again = train_cli(out, f"service.inference_service.backend={TORN}", steps=steps)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert_pool_record_matches(out, rows)
    pids = assert_real_vllm(out)
    assert all(group_gone(p) for p in pids)


def test_vllm_slower_to_start_than_its_timeout_stops_the_run_naming_the_setting(
    tmp_path: Path,
) -> None:
    """vLLM cannot answer /health within ``startup_timeout_s=5`` (it needs ~30 s to
    2 min here): the run stops with one line naming the setting and the log, and
    nothing of vLLM is left running."""
    out = tmp_path / "run"
    proc = train_cli(out, "service.inference_service.startup_timeout_s=5", steps=2)
    last = error_line(proc)
    assert "was still starting after 5s" in last, last
    assert "service.inference_service.startup_timeout_s" in last, last
    log = out / "logs" / "inference.log"
    assert f"(log: {log}" in last, last
    assert processes_logging_to(log) == []
    assert train_rows(out) == []


def test_a_vllm_that_exits_at_start_stops_the_run_with_its_own_error(tmp_path: Path) -> None:
    """vLLM refuses its flags (a ``--max-model-len`` past the model's positions) and
    exits: the run stops with one line carrying vLLM's own error, found in its log
    (not the traceback's last line), and the log's path."""
    out = tmp_path / "run"
    command = str(OmegaConf.load(RECIPE).service.inference_service.command)
    assert "--max-model-len 128" in command
    bad = command.replace("--max-model-len 128", "--max-model-len 100000")
    proc = train_cli(out, f"service.inference_service.command='{bad}'", steps=2)
    last = error_line(proc)
    assert "did not start: server exited with" in last, last
    assert "its last error: " in last and "max_model_len" in last, last
    log = out / "logs" / "inference.log"
    assert f"(log: {log})" in last, last
    assert processes_logging_to(log) == []
