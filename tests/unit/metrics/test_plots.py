"""plot_reward_curve writes a real PNG atomically, or nothing without rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexrl.metrics import plot_reward_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_writes_a_png(tmp_path: Path) -> None:
    rows = [{"step": s, "time": 1.0 + s, "reward/mean": s / 10} for s in range(1, 11)]
    rows.append({"step": 0, "val/reward/mean": 0.1})
    rows.append({"step": 10, "val/reward/mean": 0.8})
    out = tmp_path / "plots" / "reward.png"
    assert plot_reward_curve(rows, out) == out
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 5000  # axes, a line, markers, a legend
    assert [p.name for p in out.parent.iterdir()] == ["reward.png"]  # no temp file left


def test_replaces_an_existing_png(tmp_path: Path) -> None:
    out = tmp_path / "reward.png"
    out.write_bytes(b"old")
    assert plot_reward_curve([{"step": 1, "reward/mean": 0.5}], out) == out
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_no_reward_rows_returns_none(tmp_path: Path) -> None:
    out = tmp_path / "reward.png"
    rows: list[dict[str, Any]] = [
        {"step": 1, "time": 1.0, "actor/pg_loss": 0.1},
        {"step": 2, "reward/mean": None},  # a NaN reward, as metrics.jsonl stores it
    ]
    assert plot_reward_curve(rows, out) is None
    assert plot_reward_curve([], out) is None
    assert not out.exists()
