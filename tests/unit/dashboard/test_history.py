"""The dashboard's reading of the run folder: incremental, torn lines wait, a
rewritten metrics.jsonl is read again whole, and the columns hold the file's values."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.driver.dashboard.history import RunHistory, metric_columns, validation_columns
from nexrl.driver.dashboard.samples import advantage_color, group_advantages, sample_rows


def write(path: Path, rows: list[dict[str, object]], mode: str = "a") -> None:
    with path.open(mode) as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def test_poll_reads_only_new_complete_lines(tmp_path: Path) -> None:
    h = RunHistory(tmp_path)
    assert h.poll() == ([], [], False)  # no file yet
    write(tmp_path / "metrics.jsonl", [{"step": 1, "reward/mean": 0.5}])
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 2, "rew')  # torn: the writer is mid-line
    new, _, reset = h.poll()
    assert [r["step"] for r in new] == [1] and not reset
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('ard/mean": 0.75}\n')
    new, _, _ = h.poll()
    assert new == [{"step": 2, "reward/mean": 0.75}]
    assert h.poll()[0] == []
    assert [r["step"] for r in h.rows] == [1, 2]


def test_a_rewritten_file_is_read_again_whole(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    write(path, [{"step": s, "reward/mean": 0.1 * s} for s in (1, 2, 3)])
    h = RunHistory(tmp_path)
    h.poll()
    write(path, [{"step": 1, "reward/mean": 0.1}], mode="w")  # a resume repaired it
    _, _, reset = h.poll()
    assert reset and [r["step"] for r in h.rows] == [1]


def test_metric_columns_hold_the_rows_values() -> None:
    rows: list[dict[str, Any]] = [
        {"step": 0, "val/reward/mean": 0.2},  # validation before training: not a step
        {
            "step": 1,
            "reward/mean": 0.5,
            "reward/std": 0.25,
            "timing/wait_batch": 1.5,
            "timing/train": 2.0,
            "version/trainer": 1,
        },
        {"step": 2, "reward/mean": 0.75, "reward/std": None, "val/reward/mean": 0.9},
    ]
    c = metric_columns(rows)
    assert c["step"] == [1.0, 2.0]
    assert c["reward_mean"] == [0.5, 0.75]
    assert c["reward_lo"] == [0.25, 0.75] and c["reward_hi"] == [0.75, 0.75]
    assert c["t_wait"] == [1.5, 0.0]  # stacked parts: missing is 0
    assert c["v_trainer"][0] == 1.0 and math.isnan(c["v_trainer"][1])
    assert validation_columns(rows) == {"step": [0.0, 2.0], "val_reward": [0.2, 0.9]}


def test_status_eta_and_identity(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "experiment_name: exp\ntrainer:\n  total_train_steps: 10\n"
    )
    write(
        tmp_path / "metrics.jsonl",
        [
            {"step": s, "time": 100.0 + s, "reward/mean": 0.0, "timing/step": 2.0 * s}
            for s in (1, 2)
        ],
    )
    h = RunHistory(tmp_path, identity={"recipe": "r.yaml"})
    h.poll()
    s = h.status(now=110.0)
    assert (s["recipe"], s["experiment"], s["step"], s["total"]) == ("r.yaml", "exp", 2, 10)
    assert s["eta_s"] == pytest.approx(8 * 3.0)  # 8 steps left x mean step time (2 s, 4 s)
    assert s["seconds_since_last_step"] == pytest.approx(8.0)


def test_group_advantages_by_hand() -> None:
    reward = np.array([1.0, 0.0, 0.5, 0.5, 2.0])
    group = np.array([7, 7, 3, 3, 9])
    # group 7: mean 0.5 -> +0.5, -0.5; group 3: mean 0.5 -> 0, 0; group 9 alone -> 0
    assert group_advantages(reward, group).tolist() == [0.5, -0.5, 0.0, 0.0, 0.0]
    assert advantage_color(0.5, 0.5).startswith("rgba(40,160,60,0.60")
    assert advantage_color(-0.25, 0.5).startswith("rgba(210,50,50,0.30")


def test_sample_rows_from_pool_columns() -> None:
    cols = TrajectoryColumns.from_arrays(
        prompt_ids=np.array([1, 2, 3, 4]),
        prompt_lens=np.array([2, 2]),
        response_ids=np.array([5, 6, 7]),
        loss_mask=np.ones(3),
        logprobs=np.array([-0.0, -5.0, -1.0]),
        response_lens=np.array([1, 2]),
        reward=np.array([1.0, 0.0]),
        group_id=np.array([4, 4]),
        policy_version=np.array([3, 2]),
    )
    rows = sample_rows(
        cols, 9, lambda ids: " ".join(map(str, ids)), lambda ids: [f"<{i}>" for i in ids]
    )
    assert [(r["step"], r["version"], r["reward"], r["advantage"]) for r in rows] == [
        (9, 3, 1.0, 0.5),
        (9, 2, 0.0, -0.5),
    ]
    assert rows[0]["prompt"] == "1 2" and rows[1]["prompt"] == "3 4"
    assert rows[0]["response"] == "5" and rows[1]["response"] == "6 7"  # plain text too
    assert "&lt;5&gt;" in rows[0]["response_html"]  # escaped
    assert rows[1]["response_html"].count("<span") == 2
    assert "rgba(255,140,0,0.70)" in rows[1]["response_html"]  # logprob -5: most unsure
