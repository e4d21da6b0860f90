"""summarize / write_summary against a hand-computed run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexrl.driver.metrics import format_summary, summarize, write_summary

# 8 training steps, validation before step 1 (step 0) and at steps 4 and 8. The
# jsonl sink stamps every row with its clock (time, time/running_s), the step-0
# validation row included.
REWARDS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
ROWS = [
    {"step": 0, "time": 1000.0, "time/running_s": 0.0, "val/reward/mean": 0.15},
    *(
        {"step": s, "time": 1000.0 + 10 * s, "time/running_s": 10.0 * s, "reward/mean": r}
        for s, r in zip(range(1, 9), REWARDS, strict=True)
    ),
    {"step": 4, "time": 1041.0, "time/running_s": 41.0, "val/reward/mean": 0.55},
    {"step": 8, "time": 1085.0, "time/running_s": 85.0, "val/reward/mean": 0.45},
]


def test_summary_numbers() -> None:
    s = summarize(ROWS)
    assert s["steps_run"] == 8  # the step-0 validation row is not a training step
    assert (s["first_step"], s["last_step"]) == (1, 8)
    assert s["reward_first5_mean"] == pytest.approx((0.1 + 0.2 + 0.3 + 0.4 + 0.5) / 5)  # 0.3
    assert s["reward_last5_mean"] == pytest.approx((0.4 + 0.5 + 0.6 + 0.7 + 0.8) / 5)  # 0.6
    assert s["val_reward_first"] == 0.15
    assert s["val_reward_last"] == 0.45
    assert (s["val_reward_best"], s["val_reward_best_step"]) == (0.55, 4)
    assert s["wall_time_s"] == pytest.approx(85.0)


def test_short_run_and_empty_run() -> None:
    s = summarize([{"step": 1, "time": 5.0, "reward/mean": 0.5, "x": None}])
    assert s["steps_run"] == 1
    assert s["reward_first5_mean"] == s["reward_last5_mean"] == 0.5
    # the text says how many steps each mean covers: one here, not five
    assert "reward (mean of 1 step): 0.500 at the start -> 0.500 at the end" in format_summary(s)
    assert "reward (mean of 5 steps): 0.300 at the start" in format_summary(summarize(ROWS))
    assert s["val_reward_best"] is None
    assert s["wall_time_s"] == 0.0
    empty = summarize([])
    assert empty["steps_run"] == 0 and empty["first_step"] is None
    assert empty["reward_last5_mean"] is None and empty["wall_time_s"] is None


def test_write_summary(tmp_path: Path) -> None:
    text = write_summary(tmp_path, ROWS)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == json.loads(json.dumps(summarize(ROWS)))
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0] == "steps: 8 (1 -> 8), wall time 1m 25s"
    assert "0.300 at the start -> 0.600 at the end" in lines[1]
    assert lines[2] == "validation reward: 0.150 first -> 0.450 last, best 0.550 at step 4"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_validation_evaluator_metrics_are_in_the_summary(tmp_path: Path) -> None:
    """val/eval/<name> of the last validation: in summary.json and one line of text."""
    rows = [
        *ROWS,
        {"step": 4, "val/eval/exact_match": 0.25, "val/eval/right_form": 0.5},
        {"step": 8, "val/eval/exact_match": 0.375, "val/eval/right_form": 1.0},
    ]
    s = summarize(rows)
    assert s["val_eval_last"] == {"exact_match": 0.375, "right_form": 1.0}
    lines = write_summary(tmp_path, rows).splitlines()
    assert lines[3] == "validation evaluator metrics (last): exact_match 0.375, right_form 1.000"
    assert summarize(ROWS)["val_eval_last"] == {}


def test_an_sft_run_has_its_losses_and_exact_match_in_the_summary() -> None:
    """An SFT run's rows (no reward): the training loss over the first / last 5 steps,
    the validation loss and exact match (first, last, best), the data pass it ended in;
    the text says each in a line."""
    losses = [4.0, 3.0, 2.0, 1.5, 1.0, 0.8, 0.6]
    rows = [
        {"step": 0, "val/loss": 4.2, "val/exact_match": 0.0},
        *(
            {"step": s, "actor/sft_loss": v, "sft/epoch": float(s // 3)}
            for s, v in enumerate(losses, 1)
        ),
        {"step": 4, "val/loss": 1.4, "val/exact_match": 0.5},
        {"step": 7, "val/loss": 1.6, "val/exact_match": 0.75},
    ]
    s = summarize(rows)
    assert s["steps_run"] == 7
    assert s["sft_loss_first5_mean"] == pytest.approx((4.0 + 3.0 + 2.0 + 1.5 + 1.0) / 5)  # 2.3
    assert s["sft_loss_last5_mean"] == pytest.approx((2.0 + 1.5 + 1.0 + 0.8 + 0.6) / 5)  # 1.18
    assert (s["val_loss_first"], s["val_loss_last"]) == (4.2, 1.6)
    assert (s["val_loss_best"], s["val_loss_best_step"]) == (1.4, 4)
    assert (s["val_exact_first"], s["val_exact_last"], s["val_exact_best"]) == (0.0, 0.75, 0.75)
    assert s["sft_epoch_last"] == 2.0
    text = format_summary(s).splitlines()
    assert (
        "SFT loss (mean of 5 steps): 2.300 at the start -> 1.180 at the end, ending in pass 3 over the data"
        in text
    )
    assert "validation loss: 4.200 first -> 1.600 last, best 1.400 at step 4" in text
    assert "validation exact match (greedy): 0.000 first -> 0.750 last, best 0.750" in text
    assert not any(line.startswith("reward") for line in text)
