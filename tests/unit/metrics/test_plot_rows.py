"""The reward curve's incremental reader of metrics.jsonl (nexrl.metrics.tail): new lines
only, the plotted keys only, a torn line left for later, a rewritten file read again."""

from __future__ import annotations

import json
from pathlib import Path

from nexrl.metrics import read_metrics
from nexrl.metrics.plots import plotted
from nexrl.metrics.tail import PlotRows


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
