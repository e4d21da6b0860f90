"""plot_reward_curve writes a real PNG atomically, or nothing without rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nexrl.driver.metrics import plot_reward_curve

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


def test_evaluator_metrics_are_plotted_per_step(tmp_path: Path) -> None:
    """eval/<name> rows (as the controller logs them) get a panel of their own, one line
    per metric with the logged values; a resumed step's later row wins."""
    from nexrl.driver.metrics import read_metrics
    from nexrl.driver.metrics.plots import reward_figure
    from nexrl.driver.metrics.tracker import MetricsTracker

    with MetricsTracker([], tmp_path, run_name="r") as tracker:
        for step in (1, 2, 3):
            tracker.log(
                step,
                {
                    "reward/mean": step / 10,
                    "eval/partial_credit": step / 4,
                    "eval/exact": float(step == 3),
                },
            )
    rows = read_metrics(tmp_path / "metrics.jsonl")
    rows.append({"step": 3, "eval/exact": 0.5})  # step 3 logged again
    fig = reward_figure(rows)
    reward_ax, eval_ax = fig.axes
    assert [line.get_label() for line in reward_ax.get_lines()] == ["train reward/mean"]
    lines = {line.get_label(): line for line in eval_ax.get_lines()}
    assert sorted(lines) == ["exact", "partial_credit"]
    assert list(lines["partial_credit"].get_xdata()) == [1, 2, 3]
    assert list(lines["partial_credit"].get_ydata()) == [0.25, 0.5, 0.75]
    assert list(lines["exact"].get_ydata()) == [0.0, 0.0, 0.5]
    out = tmp_path / "plots" / "reward_curve.png"
    assert plot_reward_curve(rows, out) == out and out.read_bytes().startswith(PNG_MAGIC)


def test_without_evaluator_metrics_there_is_one_panel() -> None:
    from nexrl.driver.metrics.plots import reward_figure

    fig = reward_figure([{"step": 1, "reward/mean": 0.5}])
    assert len(fig.axes) == 1


def test_validation_evaluator_metrics_are_markers_in_the_metrics_panel() -> None:
    """val/eval/<name> (the evaluator's metrics at each validation): markers of the
    metric's colour beside its per-step line; a metric seen only in validation too."""
    from nexrl.driver.metrics.plots import reward_figure

    rows = [
        {"step": 0, "val/reward/mean": 0.1, "val/eval/exact": 0.0, "val/eval/form": 0.2},
        *({"step": s, "reward/mean": s / 10, "eval/exact": s / 5} for s in (1, 2, 3, 4)),
        {"step": 4, "val/reward/mean": 0.5, "val/eval/exact": 0.75, "val/eval/form": 1.0},
    ]
    _, eval_ax = reward_figure(rows).axes
    lines = {line.get_label(): line for line in eval_ax.get_lines()}
    assert sorted(lines) == ["exact", "val exact", "val form"]
    assert list(lines["val exact"].get_xdata()) == [0, 4]
    assert list(lines["val exact"].get_ydata()) == [0.0, 0.75]
    assert lines["val exact"].get_marker() == "o" and lines["val exact"].get_linestyle() == "None"
    assert lines["val exact"].get_color() == lines["exact"].get_color()
    assert list(lines["val form"].get_ydata()) == [0.2, 1.0]


def test_learning_signal_gets_the_last_panel() -> None:
    """Rows with the learning signal (as step_row logs it): a panel of its own below
    the evaluator metrics, one line per share, with the logged values."""
    from nexrl.driver.metrics.plots import reward_figure

    rows = [
        {
            "step": s,
            "reward/mean": 0.0,
            "eval/exact": 0.0,
            "rollout/zero_variance_groups": 1.0 - s / 10,
            "rollout/top_answer_share": s / 20,
        }
        for s in (1, 2, 3)
    ]
    _, eval_ax, signal_ax = reward_figure(rows).axes
    lines = {line.get_label(): list(line.get_ydata()) for line in signal_ax.get_lines()}
    assert lines == {
        "groups without reward variance": [0.9, 0.8, 0.7],
        "most common answer's share": [0.05, 0.1, 0.15],
    }
    assert [line.get_label() for line in eval_ax.get_lines()] == ["exact"]
    _, only_signal = reward_figure(
        [{k: v for k, v in r.items() if k != "eval/exact"} for r in rows]
    ).axes
    assert only_signal.get_title().startswith("Learning signal")


def test_evaluator_errors_entropy_and_legends_have_their_own_places() -> None:
    """eval/evaluator_error (the worker's count, not the evaluator's metric) is drawn in
    the learning-signal panel, not among the evaluator's metrics; the policy's entropy
    has a panel of its own; every legend sits right of its panel, off the curves."""
    from nexrl.driver.metrics.plots import reward_figure

    rows = [
        {
            "step": s,
            "reward/mean": 0.1 * s,
            "eval/exact": 0.2 * s,
            "eval/evaluator_error": 0.0,
            "actor/entropy": 2.3 - 0.1 * s,
        }
        for s in (1, 2, 3)
    ]
    reward_ax, eval_ax, entropy_ax, signal_ax = reward_figure(rows).axes
    assert [line.get_label() for line in eval_ax.get_lines()] == ["exact"]
    assert [line.get_label() for line in signal_ax.get_lines()] == [
        "samples whose evaluator raised"
    ]
    assert list(entropy_ax.get_lines()[0].get_ydata()) == pytest.approx([2.2, 2.1, 2.0])
    for ax in (reward_ax, eval_ax, entropy_ax, signal_ax):
        legend = ax.get_legend()
        assert legend is not None and legend.get_bbox_to_anchor().x0 > ax.bbox.x1, ax.get_title()


def test_an_sft_run_plots_its_losses_and_exact_match() -> None:
    """An SFT run's rows: actor/sft_loss per step (a line), val/loss at each validation
    (markers), and val/exact_match in a panel below, with the logged values."""
    from nexrl.driver.metrics.plots import reward_figure, sft_figure

    rows = [
        {"step": 0, "val/loss": 4.0, "val/exact_match": 0.0},
        *({"step": s, "actor/sft_loss": 4.0 / s} for s in (1, 2, 3, 4)),
        {"step": 4, "val/loss": 1.5, "val/exact_match": 0.75},
    ]
    assert reward_figure(rows) is None  # no reward: not an RL figure
    loss_ax, exact_ax = sft_figure(rows).axes
    lines = {line.get_label(): line for line in loss_ax.get_lines()}
    assert list(lines["train loss (actor/sft_loss)"].get_ydata()) == [4.0, 2.0, 4 / 3, 1.0]
    assert list(lines["validation loss"].get_xdata()) == [0, 4]
    assert list(lines["validation loss"].get_ydata()) == [4.0, 1.5]
    assert list(exact_ax.get_lines()[0].get_ydata()) == [0.0, 0.75]
    assert sft_figure([{"step": 1, "reward/mean": 0.5}]) is None
