"""The reward curve's incremental reader of metrics.jsonl (nexrl.driver.metrics.tail): new lines
only, the plotted keys only, a torn line left for later, a rewritten file read again."""

from __future__ import annotations

import json
from pathlib import Path

from nexrl.driver.metrics import read_metrics
from nexrl.driver.metrics.plots import plotted
from nexrl.driver.metrics.tail import MAX_POINTS, PlotRows


def row(step: int) -> dict[str, object]:
    return {
        "step": step,
        "reward/mean": step / 10,
        "eval/acc": 0.5,
        "timing/step": 1.0,
        "rollout/top_answer_share": 0.25,
    }


def lines(*steps: int) -> str:
    return "".join(json.dumps(row(s)) + "\n" for s in steps)


def test_reads_new_lines_only_and_keeps_the_plotted_keys(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reader = PlotRows(path)
    assert reader.rows() == []  # no file yet
    path.write_text(lines(1, 2))
    assert [r["step"] for r in reader.rows()] == [1, 2]
    first = reader.offset
    with path.open("a") as f:
        f.write(lines(3) + '{"step": 4, "reward/me')  # a torn last line
    got = reader.rows()
    assert [r["step"] for r in got] == [1, 2, 3]
    assert reader.offset == first + len(lines(3))
    assert got[0] == {
        "step": 1,
        "reward/mean": 0.1,
        "eval/acc": 0.5,
        "rollout/top_answer_share": 0.25,
    }
    with path.open("a") as f:
        f.write('an": 0.4}\n')  # the line completed
    assert [r["step"] for r in reader.rows()] == [1, 2, 3, 4]
    want = [{k: v for k, v in r.items() if k == "step" or plotted(k)} for r in read_metrics(path)]
    assert reader.rows() == want


def test_a_rewritten_shorter_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines(1, 2, 3))
    reader = PlotRows(path)
    assert len(reader.rows()) == 3
    path.write_text(lines(1))  # a resume kept the rows up to its checkpoint
    assert [r["step"] for r in reader.rows()] == [1]


def test_a_long_run_keeps_at_most_max_points_each_the_mean_of_as_many_steps(
    tmp_path: Path,
) -> None:
    # max_points=4, reward = step: rows 1-4 fill it and become (2, 1.5), (4, 3.5); steps
    # 5-6 and 7-8 come in pairs: (6, 5.5), (8, 7.5); full again: (4, 2.5), (8, 6.5); then
    # buckets of 4 steps: 9-12 -> (12, 10.5); 13 is the partial bucket shown as it is
    path = tmp_path / "metrics.jsonl"
    reader = PlotRows(path, max_points=4)
    rows: list[dict[str, float | None]] = [
        {"step": s, "reward/mean": float(s)} for s in range(1, 14)
    ]
    rows[4]["val/reward/mean"] = 0.9  # step 5's validation: kept as logged
    rows[6]["reward/mean"] = None  # step 7: NaN, written as null (the bucket's mean skips it)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    got = reader.rows()
    assert got == [
        {"step": 5, "val/reward/mean": 0.9},
        {"step": 4, "reward/mean": 2.5},
        {"step": 8, "reward/mean": (5.5 + 8.0) / 2},
    ]
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows[8:]))
    assert reader.rows() == [
        {"step": 5, "val/reward/mean": 0.9},
        {"step": 4, "reward/mean": 2.5},
        {"step": 8, "reward/mean": 6.75},
        {"step": 12, "reward/mean": 10.5},
        {"step": 13, "reward/mean": 13.0},
    ]


def test_ten_thousand_steps_keep_the_default_bound(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines(*range(1, 10_001)))
    got = PlotRows(path).rows()
    assert MAX_POINTS // 2 <= len(got) <= MAX_POINTS
    assert got[-1]["step"] == 10_000
    # every point the mean of the same number of steps: reward = step / 10, so a bucket
    # of k steps ending at s has mean (s - (k - 1) / 2) / 10
    k = got[1]["step"] - got[0]["step"]
    assert all(abs(r["reward/mean"] - (r["step"] - (k - 1) / 2) / 10) < 1e-9 for r in got[:-1])
