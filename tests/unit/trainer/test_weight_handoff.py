"""The trainer's side of the weight handoff in memory (plain engine, CPU, ``shm``): a
step hands its weights over in the channel (the snapshot's tensors), the snapshot
of that version lands on disk behind it with the same bytes, the buffer is not
overwritten before that, and a failed background write stops the next publish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from nexrl.core.weights.handoff import open_channel
from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.trainer import handoff
from nexrl.trainer.errors import TrainerError
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import plain_trainer


def _trainer(model_dir: Path, tmp_path: Path) -> Any:
    return plain_trainer(spec(model_dir, snapshot_dir=str(tmp_path / "snaps")))


def _snapshot_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_a_step_hands_over_in_memory_and_writes_the_snapshot_behind(
    tiny_model_dir: Path, tmp_path: Path, vocab_size: int
) -> None:
    t = _trainer(tiny_model_dir, tmp_path)
    info = handoff.enable(t)
    assert info["transport"] == "shm" and info["device_uuid"] is None
    results = []
    for seed in range(2):
        results.append(t.step(make_batch(vocab_size, seed=seed, model_dir=tiny_model_dir)))
        desc = results[-1].handoff
        assert desc is not None and desc["version"] == results[-1].policy_version
        assert results[-1].metrics["timing/weight_handoff"] > 0
        server = open_channel(desc)
        t.handoff.wait()  # the snapshot written behind is the buffer's version, bit for bit
        snap = _snapshot_tensors(Path(results[-1].snapshot_path))
        assert set(snap) == set(server.views)
        assert all(torch.equal(snap[k], v) for k, v in server.views.items())
        weights = {k: v for k, v in t.engine.module.state_dict().items() if k in snap}
        assert all(torch.equal(weights[k], v) for k, v in server.views.items())
    assert results[0].handoff["id"] == results[1].handoff["id"]  # one buffer for the run
    assert "timing/snapshot_background" in results[1].metrics
    path = results[-1].snapshot_path
    t.close()
    assert latest_snapshot(tmp_path / "snaps") == (2, Path(path))
    assert not Path(results[0].handoff["path"]).exists()  # the buffer is freed


def test_the_buffer_waits_for_the_snapshot_and_a_failed_write_stops_the_next_publish(
    tiny_model_dir: Path, tmp_path: Path, vocab_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _trainer(tiny_model_dir, tmp_path)
    handoff.enable(t)
    publish = t.publisher.publish
    seen: list[int] = []

    def slow_then_fail(state: Any, config: Any, version: int) -> Any:
        import time

        time.sleep(0.3)  # the next step's copy must wait for this one to finish
        seen.append(int(open_channel(t.handoff.channel.descriptor()).stamp()))
        if version == 2:
            raise OSError(28, "No space left on device")
        return publish(state, config, version)

    monkeypatch.setattr(t.publisher, "publish", slow_then_fail)
    t.step(make_batch(vocab_size, seed=0, model_dir=tiny_model_dir))
    t.step(make_batch(vocab_size, seed=1, model_dir=tiny_model_dir))
    assert seen == [1]  # v1's snapshot read v1's buffer: v2 waited for it
    with pytest.raises(TrainerError, match=r"snapshot v2.*No space left"):
        t.step(make_batch(vocab_size, seed=2, model_dir=tiny_model_dir))
    assert seen == [1, 2]  # each snapshot read its own version
    assert latest_snapshot(tmp_path / "snaps") == (1, tmp_path / "snaps" / "v1")
    t.close()


def test_lora_runs_keep_files(tiny_model_dir: Path, tmp_path: Path) -> None:
    t = _trainer(tiny_model_dir, tmp_path)
    t.lora = True
    with pytest.raises(TrainerError, match="LoRA"):
        handoff.enable(t)
    assert t.handoff is None
    t.close()
