"""ProgressDisplay: plain lines off a terminal, a tqdm bar on one (a real
pseudo-terminal, in a child process) or when asked."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from nexrl.driver.metrics import ProgressDisplay
from tests._terminal import run_on_a_terminal


def test_plain_lines_when_not_a_tty() -> None:
    stream = io.StringIO()
    progress = ProgressDisplay(100, initial_step=2, stream=stream)
    assert not progress.uses_bar
    progress.update(3, {"reward/mean": 0.4123, "perf/trajectories_per_s": 12.34})
    progress.update(4, {"reward/mean": 0.5, "version/lag_max": 1.0, "other": 9.0})
    progress.write("validation done")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("step 3/100 reward=0.412 traj/s=12.3 elapsed=")
    assert lines[1].startswith("step 4/100 reward=0.500 staleness=1 elapsed=")
    assert "eta=" in lines[0] and "eta=" in lines[1]
    assert "other" not in lines[1]
    assert lines[2] == "validation done"


def test_plain_line_without_metrics() -> None:
    stream = io.StringIO()
    ProgressDisplay(10, stream=stream).update(1, {})
    assert stream.getvalue().startswith("step 1/10 elapsed=")


def test_skipped_nonfinite_steps_show_once_counted() -> None:
    stream = io.StringIO()
    progress = ProgressDisplay(10, stream=stream)
    progress.update(1, {"reward/mean": 0.5, "train/skipped_nonfinite_total": 0.0})
    progress.update(2, {"reward/mean": 0.5, "train/skipped_nonfinite_total": 2.0})
    first, second = stream.getvalue().splitlines()
    assert "nan_skipped" not in first
    assert second.startswith("step 2/10 reward=0.500 nan_skipped=2 elapsed=")


def test_bar_when_enabled_shows_postfix() -> None:
    stream = io.StringIO()
    progress = ProgressDisplay(10, initial_step=2, enabled=True, stream=stream)
    assert progress.uses_bar
    progress.update(5, {"reward/mean": 0.75, "version/lag_max": 2.0})
    progress.close()
    text = stream.getvalue()
    assert "5/10" in text
    assert "reward=0.750 staleness=2" in text and "eta " in text


# A child that shows 3 steps the way the controller does (on sys.stderr, the default).
CHILD = """
import sys, time
from nexrl.driver.metrics import ProgressDisplay
progress = ProgressDisplay(3)
for step in (1, 2, 3):
    time.sleep(0.05)
    progress.update(step, {
        "reward/mean": 0.25 * step, "perf/trajectories_per_s": 4.0, "version/lag_max": 1,
        "eval/exact": 0.5, "eval/partial_credit": 0.75,
    })
progress.close()
progress.write("summary: the last line")
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run_on_a_pty(rows: int, columns: int) -> str:
    """Run CHILD on a new pseudo-terminal of that size; all it wrote."""
    code, out = run_on_a_terminal([sys.executable, "-c", CHILD], _env(), rows=rows, columns=columns)
    assert code == 0, out
    return out


@pytest.mark.parametrize("size", [(24, 120), (0, 0)], ids=["sized", "no-size"])
def test_a_bar_with_eta_on_a_pseudo_terminal(size: tuple[int, int]) -> None:
    """On a terminal: a bar (redrawn in place with \\r) with step/total, elapsed and ETA,
    reward, traj/s, staleness and the evaluator metrics; no plain lines. A terminal that
    reports no size (0 x 0) still gets the bar (tqdm alone drew nothing there)."""
    text = _run_on_a_pty(*size)
    frames = [f for f in text.replace("\r\n", "\n").replace("\n", "\r").split("\r") if f.strip()]
    bar = [f for f in frames if f.startswith("train 3/3 |")]
    assert bar, text
    assert "| 00:00 eta 00:00, reward=0.750 traj/s=4.0 staleness=1 " in bar[-1]
    assert bar[-1].rstrip().endswith("exact=0.5 partial_credit=0.75")
    assert any(f.startswith("train 1/3 |") and " eta " in f for f in frames)
    assert "step 1/3" not in text  # no plain lines
    assert frames[-1].strip() == "summary: the last line"


def test_plain_lines_with_eta_when_stderr_is_a_pipe() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=_env(), check=True
    )
    lines = proc.stderr.splitlines()
    assert len(lines) == 4 and "\r" not in proc.stderr
    assert lines[0].startswith(
        "step 1/3 reward=0.250 traj/s=4.0 staleness=1 exact=0.5 partial_credit=0.75 elapsed="
    )
    assert lines[0].endswith("s") and " eta=" in lines[0] and lines[2].endswith(" eta=0s")
    assert lines[3] == "summary: the last line"


def test_a_warning_is_one_line_on_the_terminal_and_one_warning_record_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    stream = io.StringIO()
    progress = ProgressDisplay(10, stream=stream, log=logging.getLogger("nexrl.details.test"))
    with caplog.at_level(logging.INFO, logger="nexrl.details.test"):
        progress.warn("step 3: nothing to learn from")
    progress.close()
    assert stream.getvalue() == "warning: step 3: nothing to learn from\n"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "warning: step 3: nothing to learn from")
    ]


def test_the_eta_after_the_first_step_is_the_pace_since_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resumed run's first step took the checkpoint load too (7 s): the ETA said 305 s
    for 45 steps that took 14 s, and only shrank slowly."""
    import nexrl.driver.metrics.progress as progress_module

    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    progress = ProgressDisplay(60, initial_step=14, stream=stream)
    clock[0] += 7.0  # the resume's start, then step 15
    progress.update(15)
    clock[0] += 0.5
    progress.update(16)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("elapsed=7s eta=315s")  # a first guess: 7 s a step
    assert lines[1].endswith("elapsed=8s eta=22s")  # 0.5 s a step, 44 steps left
