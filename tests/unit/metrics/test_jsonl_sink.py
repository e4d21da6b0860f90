"""metrics.jsonl: rows on disk, resume truncation, torn lines, non-finite values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nexrl.driver.metrics import JsonlSink, MetricsTracker, read_metrics


def write_steps(out: Path, steps: range, resume_step: int | None = None) -> None:
    sink = JsonlSink(out, run_name="t", resume_step=resume_step)
    for step in steps:
        sink.log(step, {"reward/mean": step / 10, "actor/pg_loss": -float(step)})
    sink.close()


def test_rows_are_written_and_read_back(tmp_path: Path) -> None:
    write_steps(tmp_path, range(1, 4))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["reward/mean"] for r in rows] == [0.1, 0.2, 0.3]
    assert rows[2]["actor/pg_loss"] == -3.0
    assert all(isinstance(r["time"], float) and r["time"] > 1.6e9 for r in rows)
    assert rows[0]["time"] <= rows[1]["time"] <= rows[2]["time"]


def test_each_row_is_on_disk_before_close(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path)
    sink.log(1, {"reward/mean": 0.5})
    # another reader sees the row while the sink is still open (flushed per line)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["reward/mean"]) for r in rows] == [(1, 0.5)]
    sink.close()


def test_appends_to_existing_file_without_resume(tmp_path: Path) -> None:
    write_steps(tmp_path, range(1, 3))
    write_steps(tmp_path, range(3, 5))
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


def test_resume_drops_rows_after_the_checkpoint_step(tmp_path: Path) -> None:
    write_steps(tmp_path, range(1, 8))  # the run got to step 7, last checkpoint at step 4
    before = read_metrics(tmp_path / "metrics.jsonl")
    sink = JsonlSink(tmp_path, resume_step=4)
    kept = read_metrics(tmp_path / "metrics.jsonl")
    assert kept == before[:4]  # rows 1..4 unchanged, byte for byte in value
    sink.log(5, {"reward/mean": 0.99})
    sink.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["reward/mean"] == 0.99
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temp file left


def test_resume_step_zero_starts_afresh(tmp_path: Path) -> None:
    write_steps(tmp_path, range(1, 4))
    JsonlSink(tmp_path, resume_step=0).close()
    assert read_metrics(tmp_path / "metrics.jsonl") == []


def test_torn_last_line_is_tolerated_and_repaired(tmp_path: Path) -> None:
    write_steps(tmp_path, range(1, 3))
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 3, "time": 1700000000.0, "rew')  # killed mid-write
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    # resuming from step 2: the torn row is dropped and appending starts on a clean line
    sink = JsonlSink(tmp_path, resume_step=2)
    sink.log(3, {"reward/mean": 0.3})
    sink.close()
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert path.read_text().endswith("}\n")
    assert '"rew\n' not in path.read_text()


def test_torn_line_is_repaired_on_a_plain_append_too(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "time": 1.0, "reward/mean": 0.1}\n{"step": 2, "ti')
    sink = JsonlSink(tmp_path)  # no resume step: nothing dropped but the torn line
    sink.log(2, {"reward/mean": 0.2})
    sink.close()
    assert [(r["step"], r["reward/mean"]) for r in read_metrics(path)] == [(1, 0.1), (2, 0.2)]


def test_a_bad_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        read_metrics(path)


def test_nan_and_inf_are_written_as_null(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path)
    sink.log(1, {"a": math.nan, "b": math.inf, "c": -math.inf, "d": 2.5})
    sink.close()
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    row = json.loads(line)  # strict JSON: no NaN/Infinity tokens
    assert "NaN" not in line and "Infinity" not in line
    assert (row["a"], row["b"], row["c"], row["d"]) == (None, None, None, 2.5)


def test_tracker_always_writes_jsonl_and_converts_values(tmp_path: Path) -> None:
    with MetricsTracker([], tmp_path, run_name="t") as tracker:
        assert tracker.active == ["jsonl"]
        tracker.log(1, {"reward/mean": 1, "batch/size": True})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[0]["reward/mean"] == 1.0 and isinstance(rows[0]["reward/mean"], float)
    assert rows[0]["batch/size"] == 1.0


def test_tracker_resume_truncates(tmp_path: Path) -> None:
    with MetricsTracker(["jsonl"], tmp_path, run_name="t") as tracker:
        for step in range(1, 6):
            tracker.log(step, {"reward/mean": 0.1})
    with MetricsTracker(["jsonl"], tmp_path, run_name="t", resume_step=3) as tracker:
        tracker.log(4, {"reward/mean": 0.7})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["reward/mean"]) for r in rows] == [
        (1, 0.1),
        (2, 0.1),
        (3, 0.1),
        (4, 0.7),
    ]
