"""MetricsTracker: sink selection, failure isolation, console and optional sinks."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from nexrl.core.config.sections.runtime import LoggerConfig
from nexrl.driver.metrics import (
    METRIC_SINKS,
    ConsoleSink,
    MetricSink,
    MetricSinkError,
    MetricsTracker,
    read_metrics,
)


class FlakySink(MetricSink):
    """A dashboard that works for two steps and then goes away."""

    name = "flaky"
    calls: ClassVar[list[int]] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        FlakySink.calls.append(step)
        if step >= 3:
            raise ConnectionError("dashboard went away")


def test_a_failing_sink_is_disabled_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(METRIC_SINKS._entries, "flaky", FlakySink)  # registered for this test only
    monkeypatch.setattr(FlakySink, "calls", [])
    caplog.set_level(logging.WARNING, logger="nexrl.driver.metrics")
    tracker = MetricsTracker(["flaky"], tmp_path, run_name="t")
    assert tracker.active == ["jsonl", "flaky"]
    for step in range(1, 7):
        tracker.log(step, {"reward/mean": step / 10})
    tracker.close()
    assert FlakySink.calls == [1, 2, 3]  # never called again after it failed
    assert tracker.active == []  # closed
    assert "ConnectionError: dashboard went away" in tracker.disabled["flaky"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "flaky" in warnings[0].getMessage() and "disabled" in warnings[0].getMessage()
    # training went on: every step is in metrics.jsonl
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_jsonl_errors_propagate(tmp_path: Path) -> None:
    tracker = MetricsTracker(["console"], tmp_path, run_name="t")
    tracker.sinks[0].close()  # the jsonl file is gone from under the tracker
    with pytest.raises(ValueError, match="after close"):
        tracker.log(1, {"reward/mean": 0.5})
    assert "jsonl" in tracker.active  # not silently disabled
    tracker.close()


def test_unknown_backend_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(MetricSinkError, match=r"'tensorbord'.*console, jsonl, mlflow, tensorboard"):
        MetricsTracker(["tensorbord"], tmp_path, run_name="t")


def test_console_sink_logs_key_metrics(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nexrl.driver.metrics")
    with MetricsTracker(["console"], tmp_path, run_name="t") as tracker:
        tracker.log(7, {"reward/mean": 0.4123, "actor/pg_loss": -0.05, "misc/x": 1.0})
    lines = [r.getMessage() for r in caplog.records if r.name == "nexrl.driver.metrics"]
    assert lines == ["step 7 | reward 0.4123 | loss -0.05"]


def test_console_line_falls_back_to_first_metrics() -> None:
    line = ConsoleSink(Path(".")).format_line(2, {"z": 1.0, "a": 2.0})
    assert line == "step 2 | a 2 | z 1"


@pytest.mark.parametrize("backend", ["mlflow", "wandb"])
def test_missing_optional_package_is_a_clear_error(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both are in the lock: hidden as in an environment without them (see test_logger_rule)
    for name in [m for m in list(sys.modules) if m.startswith(f"{backend}.")] + [backend]:
        monkeypatch.setitem(sys.modules, name, None)  # its submodules too, if imported
    assert importlib.util.find_spec(backend) is None
    with pytest.raises(MetricSinkError) as info:
        MetricsTracker(["console", backend], tmp_path, run_name="t")
    msg = str(info.value)
    assert f"'{backend}' metric sink" in msg
    assert f"pip install {backend}" in msg
    assert "logger.backends" in msg


def test_every_sink_is_documented_in_logger_config() -> None:
    import dataclasses

    help_text = next(
        f.metadata["help"] for f in dataclasses.fields(LoggerConfig) if f.name == "backends"
    )
    for name in METRIC_SINKS:
        assert name in help_text
    assert "always on" in help_text


def test_wall_time_counts_only_time_running_across_a_resume(tmp_path: Path) -> None:
    """A run logs steps 1-3 (checkpoint at 2) over ~0.3 s, stops, sits idle 1.5 s, and is
    resumed at step 2 for steps 3-4 over ~0.2 s: the summary's wall time is the ~0.4 s
    that led to the rows kept (step 3's first attempt, dropped on resume, is not
    counted), not the ~2 s between the first row and the last."""
    import time

    from nexrl.driver.metrics import summarize

    first = MetricsTracker([], tmp_path, run_name="r")
    for step in (1, 2, 3):
        time.sleep(0.1)
        first.log(step, {"reward/mean": 0.1})
    first.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    at_checkpoint = rows[1]["time/running_s"]
    assert 0.2 <= at_checkpoint < rows[2]["time/running_s"]
    time.sleep(1.5)  # stopped: nothing runs
    resumed = MetricsTracker([], tmp_path, run_name="r", resume_step=2)
    for step in (3, 4):
        time.sleep(0.1)
        resumed.log(step, {"reward/mean": 0.2})
    resumed.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    running = [r["time/running_s"] for r in rows]
    assert running == sorted(running) and running[2] > at_checkpoint + 0.09  # (ms rounding)
    summary = summarize(rows)
    assert summary["wall_time_s"] == running[-1]
    assert 0.4 <= summary["wall_time_s"] < 1.5 < rows[-1]["time"] - rows[0]["time"]


def test_a_resume_logs_the_checkpoints_row_only_when_the_file_lacks_it(tmp_path: Path) -> None:
    # The killed run logged steps 1 and 3; its checkpoint at step 2 carries step 2's row.
    with MetricsTracker([], tmp_path, run_name="r") as first:
        first.log(1, {"reward/mean": 0.1})
        first.log(3, {"reward/mean": 0.3})
    with MetricsTracker([], tmp_path, run_name="r", resume_step=2) as resumed:
        assert resumed.restore(2, {"reward/mean": 0.2}) is True
        assert resumed.restore(1, {"reward/mean": 9.0}) is False  # step 1's row is kept
        resumed.log(3, {"reward/mean": 0.35})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["reward/mean"]) for r in rows] == [(1, 0.1), (2, 0.2), (3, 0.35)]
    # a second resume from the same checkpoint finds the row and does not log it twice
    with MetricsTracker([], tmp_path, run_name="r", resume_step=2) as again:
        assert again.restore(2, {"reward/mean": 0.2}) is False
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_a_metrics_file_removed_mid_run_is_written_again_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``rm metrics.jsonl`` during a run: the rows went on into the removed file, lost,
    and the run's end failed on the missing file with a traceback."""
    with MetricsTracker([], tmp_path, run_name="r") as tracker:
        tracker.log(1, {"reward/mean": 0.1})
        (tmp_path / "metrics.jsonl").unlink()
        with caplog.at_level(logging.WARNING, logger="nexrl.driver.metrics"):
            tracker.log(2, {"reward/mean": 0.2})
            tracker.log(3, {"reward/mean": 0.3})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [2, 3]
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{tmp_path / 'metrics.jsonl'} was removed or replaced during the run: the rows "
        "from step 2 on are in a new file; the earlier ones are not (nor in its plots and "
        "summary)"
    ]
