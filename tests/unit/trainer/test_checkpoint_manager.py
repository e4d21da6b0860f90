"""Checkpoint commit protocol, latest pointer, resume modes and RNG states (no DeepSpeed)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nexrl.core.weights.checkpoint import (
    CheckpointError,
    CheckpointManager,
    get_rng_state,
    is_complete,
    set_rng_state,
)


class FileEngine:
    """Writes/reads one tensor as its 'engine state'."""

    rank = 0

    def __init__(self, world_size: int = 1) -> None:
        self.world_size = world_size
        self.value = torch.zeros(3)

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        (Path(save_dir) / tag).mkdir(parents=True)
        torch.save(self.value, Path(save_dir) / tag / "w.pt")

    def load_checkpoint(self, load_dir: str, tag: str) -> None:
        self.value = torch.load(Path(load_dir) / tag / "w.pt")

    def barrier(self) -> None:
        pass

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()


def _state(step: int, **extra: Any) -> dict[str, Any]:
    return {"global_step": step, "policy_version": step, **extra}


def test_save_load_roundtrip_and_latest(tmp_path: Path) -> None:
    mgr, eng = CheckpointManager(tmp_path), FileEngine()
    for step in (1, 2):
        eng.value = torch.full((3,), float(step))
        assert mgr.save(eng, step, _state(step)) == tmp_path / f"step_{step}"
    assert (tmp_path / "latest").read_text().strip() == "step_2"
    assert json.loads((tmp_path / "step_2" / "meta.json").read_text())["policy_version"] == 2
    eng2 = FileEngine()
    found = mgr.resolve("auto")
    assert found is not None
    state = mgr.load(eng2, found)
    assert state["global_step"] == 2 and torch.equal(eng2.value, torch.full((3,), 2.0))
    assert mgr.resolve("disable") is None


def test_failed_commit_keeps_latest_and_removes_the_partial_folder(tmp_path: Path) -> None:
    mgr, eng = CheckpointManager(tmp_path), FileEngine()
    mgr.save(eng, 1, _state(1))
    with pytest.raises(CheckpointError, match=r"step_2.*latest' still names the previous"):
        mgr.save(eng, 2, _state(2, bad=lambda: None))  # the trainer state cannot be pickled
    assert mgr.latest() == tmp_path / "step_1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_1"]


def test_debris_of_a_killed_save_is_ignored_then_removed_by_the_next_save(
    tmp_path: Path,
) -> None:
    mgr, eng = CheckpointManager(tmp_path), FileEngine()
    mgr.save(eng, 1, _state(1))
    # a save of step 2 killed before its rename, one killed before 'latest' moved
    (tmp_path / ".tmp-step_2" / "engine").mkdir(parents=True)
    (tmp_path / f".latest.tmp-{'cd' * 16}").write_text("step_2\n")
    assert mgr.latest() == tmp_path / "step_1" and [s for s, _ in mgr.complete()] == [1]
    mgr.save(eng, 2, _state(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_1", "step_2"]


def test_incomplete_or_stale_latest_falls_back_to_newest_complete(tmp_path: Path) -> None:
    mgr, eng = CheckpointManager(tmp_path), FileEngine()
    mgr.save(eng, 1, _state(1))
    mgr.save(eng, 2, _state(2))
    (tmp_path / "step_2" / "meta.json").unlink()  # as if meta never landed
    (tmp_path / "step_3").mkdir()
    assert not is_complete(tmp_path / "step_2")
    assert mgr.latest() == tmp_path / "step_1"
    (tmp_path / "latest").write_text("garbage")
    assert mgr.latest() == tmp_path / "step_1"


def test_from_path_accepts_a_folder_or_a_root_and_explains_bad_paths(tmp_path: Path) -> None:
    mgr, eng = CheckpointManager(tmp_path / "ck"), FileEngine()
    mgr.save(eng, 4, _state(4))
    assert mgr.resolve("from_path", tmp_path / "ck" / "step_4") == tmp_path / "ck" / "step_4"
    assert mgr.resolve("from_path", tmp_path / "ck") == tmp_path / "ck" / "step_4"
    with pytest.raises(CheckpointError, match=r"not a complete checkpoint"):
        mgr.resolve("from_path", tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match=r"resume.path is not set"):
        mgr.resolve("from_path", None)
    with pytest.raises(CheckpointError, match=r"disable, auto, from_path"):
        mgr.resolve("sometimes")


def test_world_size_mismatch_is_refused(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path)
    mgr.save(FileEngine(world_size=2), 1, _state(1))
    with pytest.raises(CheckpointError, match=r"2 trainer rank.*world_size=1"):
        mgr.load(FileEngine(world_size=1), tmp_path / "step_1")


def test_keep_prunes_old_checkpoints(tmp_path: Path) -> None:
    mgr, eng = CheckpointManager(tmp_path, keep=2), FileEngine()
    for step in range(1, 5):
        mgr.save(eng, step, _state(step))
    assert [s for s, _ in mgr.complete()] == [3, 4]


def test_rng_states_roundtrip() -> None:
    state = get_rng_state()
    a = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_rng_state(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == a
