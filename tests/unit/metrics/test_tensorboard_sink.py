"""The tensorboard sink writes event files TensorBoard itself reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nexrl.driver.metrics import MetricsTracker, TensorBoardSink


def scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_scalars_are_read_back(tmp_path: Path) -> None:
    with MetricsTracker(["tensorboard"], tmp_path, run_name="t") as tracker:
        for step in (1, 2, 3):
            tracker.log(step, {"reward/mean": step * 0.25, "actor/pg_loss": -step * 1.5})
    log_dir = tmp_path / "tensorboard"
    assert any(p.name.startswith("events.out.tfevents") for p in log_dir.iterdir())
    assert scalars(log_dir, "reward/mean") == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert scalars(log_dir, "actor/pg_loss") == [(1, -1.5), (2, -3.0), (3, -4.5)]


def test_resume_purges_steps_after_the_checkpoint(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    for step in range(1, 6):
        sink.log(step, {"reward/mean": 0.1 * step})
    sink.close()
    sink = TensorBoardSink(tmp_path, resume_step=2)
    for step in (3, 4):
        sink.log(step, {"reward/mean": 0.9})
    sink.close()
    got = scalars(tmp_path / "tensorboard", "reward/mean")
    assert [s for s, _ in got] == [1, 2, 3, 4]
    assert [v for _, v in got] == pytest.approx([0.1, 0.2, 0.9, 0.9])
