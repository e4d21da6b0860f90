"""Run metrics: sinks, the tracker that fans out to them, progress, plots and summary.

Usage (what a training loop does)::

    from pathlib import Path

    from nexrl.driver.metrics import (
        MetricsTracker, ProgressDisplay, plot_reward_curve, read_metrics, write_summary,
    )

    out = Path("runs/max_digit_tiny")
    tracker = MetricsTracker(
        ["console", "tensorboard"],  # logger.backends; jsonl is always on
        out,
        run_name="max_digit_tiny",
        config={"project_name": "nexrl"},
        resume_step=None,  # or the step of the checkpoint being resumed
    )
    progress = ProgressDisplay(total_steps=100)
    for step in range(1, 101):
        metrics = {"reward/mean": 0.5, "perf/trajectories_per_s": 12.0}
        tracker.log(step, metrics)
        progress.update(step, metrics)
        if step % 10 == 0:
            plot_reward_curve(read_metrics(out / "metrics.jsonl"), out / "plots" / "reward.png")
    progress.close()
    tracker.close()
    print(write_summary(out, read_metrics(out / "metrics.jsonl")))

Modules: ``sinks`` (``METRIC_SINKS`` by name), ``tracker`` (``MetricsTracker``,
``read_metrics``), ``progress`` (``ProgressDisplay``), ``plots``
(``plot_reward_curve``), ``summary`` (``summarize``, ``write_summary``) and
``learning_signal`` (is there anything to learn from: ``signal_metrics``,
``LearningSignalWatch``).
"""

from __future__ import annotations

from nexrl.driver.metrics.plots import plot_reward_curve
from nexrl.driver.metrics.progress import ProgressDisplay
from nexrl.driver.metrics.sinks import (
    METRIC_SINKS,
    METRICS_FILE,
    ConsoleSink,
    JsonlSink,
    MetricSink,
    MetricSinkError,
    MlflowSink,
    TensorBoardSink,
    WandbSink,
    missing_packages,
)
from nexrl.driver.metrics.summary import SUMMARY_FILE, format_summary, summarize, write_summary
from nexrl.driver.metrics.tracker import MetricsTracker, read_metrics

__all__ = [
    "METRICS_FILE",
    "METRIC_SINKS",
    "SUMMARY_FILE",
    "ConsoleSink",
    "JsonlSink",
    "MetricSink",
    "MetricSinkError",
    "MetricsTracker",
    "MlflowSink",
    "ProgressDisplay",
    "TensorBoardSink",
    "WandbSink",
    "format_summary",
    "missing_packages",
    "plot_reward_curve",
    "read_metrics",
    "summarize",
    "write_summary",
]
