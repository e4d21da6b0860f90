"""A corrupted (truncated or altered) latest checkpoint or snapshot, with the real
DeepSpeed trainer (CPU, gloo): detected by the checksums written at commit time;
the resume falls back to the previous good checkpoint and says so, republishes a
corrupted snapshot, and stops with a clear error when no checkpoint is good."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.weights.checkpoint import CheckpointError, verify_checkpoint
from nexrl.core.weights.snapshot import CHECKSUMS_FILE, list_snapshots, verify_snapshot
from nexrl.trainer import create_trainer
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")

SETTINGS: dict[str, Any] = {"trainer": {"save_every": 1, "lr": 1e-2}, "keep_snapshots": 3}


def _spec(model_dir: Path, run: Path, **extra: Any) -> Any:
    return spec(
        model_dir,
        checkpoint_dir=str(run / "ck"),
        snapshot_dir=str(run / "snaps"),
        **SETTINGS,
        **extra,
    )


@pytest.fixture(scope="module")
def pristine(
    tiny_model_dir: Path, vocab_size: int, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """A run folder after 3 real trainer steps (checkpoints step_1..3, snapshots v1..v3)
    and the weights after each step."""
    run = tmp_path_factory.mktemp("pristine")
    trainer = create_trainer(_spec(tiny_model_dir, run))
    weights = {}
    for i in range(3):
        trainer.train_step(make_batch(vocab_size, groups=2, group_size=4, seed=i))
        state = trainer.full_state_dict()
        assert state is not None
        weights[i + 1] = {k: v.detach().clone() for k, v in state.items()}
    trainer.close()
    assert (run / "ck" / "latest").read_text().strip() == "step_3"
    return {"run": run, "weights": weights}


@pytest.fixture()
def run(pristine: dict[str, Any], tmp_path: Path) -> Path:
    shutil.copytree(pristine["run"], tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def _largest_file(folder: Path) -> Path:
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("nexrl")
    ]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("corrupt", [_truncate, _flip_byte], ids=["truncated", "flipped_byte"])
def test_a_corrupted_latest_checkpoint_falls_back_to_the_previous_one(
    tiny_model_dir: Path,
    run: Path,
    pristine: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    corrupt: Callable[[Path], None],
) -> None:
    damaged = _largest_file(run / "ck" / "step_3" / "engine")
    size = damaged.stat().st_size
    corrupt(damaged)
    assert verify_checkpoint(run / "ck" / "step_2") is None
    problem = verify_checkpoint(run / "ck" / "step_3")
    assert problem is not None and str(damaged) in problem
    assert ("truncated" in problem) == (damaged.stat().st_size < size)

    with caplog.at_level(logging.WARNING):
        resumed = create_trainer(_spec(tiny_model_dir, run, resume_mode="auto"))
    assert resumed.resumed_from == run / "ck" / "step_2"
    assert (resumed.global_step, resumed.policy_version) == (2, 2)
    state = resumed.full_state_dict()
    assert state is not None and _same(state, pristine["weights"][2])
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"corrupted checkpoint skipped: {run / 'ck' / 'step_3'} (")
    assert str(damaged) in warnings[0]
    assert warnings[0].endswith(f"resuming from {run / 'ck' / 'step_2'} instead")
    assert resumed.resume_note is not None and str(damaged) in resumed.resume_note
    # the snapshot the inference server starts from is v2, whole; v3 is gone
    assert [v for v, _ in list_snapshots(run / "snaps")] == [1, 2]
    resumed.close()


def test_every_checkpoint_corrupted_is_a_clear_error_not_a_fresh_start(
    tiny_model_dir: Path, run: Path
) -> None:
    for step in (1, 2, 3):
        _truncate(_largest_file(run / "ck" / f"step_{step}" / "engine"))
    with pytest.raises(CheckpointError) as err:
        create_trainer(_spec(tiny_model_dir, run, resume_mode="auto"))
    message = str(err.value)
    assert message.startswith(f"every checkpoint under {str(run / 'ck')!r} is corrupted: ")
    assert all(str(run / "ck" / f"step_{s}") in message for s in (1, 2, 3))
    assert "resume.mode: disable" in message and "\n" not in message


def test_a_corrupted_snapshot_is_published_again_on_resume(
    tiny_model_dir: Path, run: Path, pristine: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    weights = run / "snaps" / "v3" / "model.safetensors"
    _flip_byte(weights)
    problem = verify_snapshot(run / "snaps" / "v3")
    assert problem is not None and str(weights) in problem and "sha256" in problem
    with caplog.at_level(logging.WARNING):
        resumed = create_trainer(_spec(tiny_model_dir, run, resume_mode="auto"))
    assert resumed.resumed_from == run / "ck" / "step_3"
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and warnings[0].startswith("corrupted snapshot v3: ")
    assert str(weights) in warnings[0]
    assert verify_snapshot(run / "snaps" / "v3") is None
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(run / "snaps" / "v3", dtype=torch.float32)
    assert _same(pristine["weights"][3], reloaded.state_dict())
    resumed.close()


def test_checkpoints_and_snapshots_without_checksums_still_load(
    tiny_model_dir: Path, run: Path, pristine: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Written before checksums were recorded: trusted as they are."""
    for step in (1, 2, 3):
        meta_file = run / "ck" / f"step_{step}" / "meta.json"
        meta = json.loads(meta_file.read_text())
        assert set(meta["files"]) >= {"trainer_state.pt", "rng_rank0.pt"}
        del meta["files"]
        meta_file.write_text(json.dumps(meta))
    for version in (1, 2, 3):
        (run / "snaps" / f"v{version}" / CHECKSUMS_FILE).unlink()
    assert verify_checkpoint(run / "ck" / "step_3") is None
    assert verify_snapshot(run / "snaps" / "v3") is None
    with caplog.at_level(logging.WARNING):
        resumed = create_trainer(_spec(tiny_model_dir, run, resume_mode="auto"))
    assert resumed.resumed_from == run / "ck" / "step_3"
    assert not _warnings(caplog)
    state = resumed.full_state_dict()
    assert state is not None and _same(state, pristine["weights"][3])
    resumed.close()
