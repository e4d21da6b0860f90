"""ProgressDisplay: plain lines off a terminal, a tqdm bar when asked."""

from __future__ import annotations

import io

from nexrl.metrics import ProgressDisplay


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
    assert lines[1].startswith("step 4/100 reward=0.500 lag=1 elapsed=")
    assert "other" not in lines[1]
    assert lines[2] == "validation done"


def test_plain_line_without_metrics() -> None:
    stream = io.StringIO()
    ProgressDisplay(10, stream=stream).update(1, {})
    assert stream.getvalue().startswith("step 1/10 elapsed=")


def test_bar_when_enabled_shows_postfix() -> None:
    stream = io.StringIO()
    progress = ProgressDisplay(10, initial_step=2, enabled=True, stream=stream)
    assert progress.uses_bar
    progress.update(5, {"reward/mean": 0.75, "version/lag_max": 2.0})
    progress.close()
    text = stream.getvalue()
    assert "5/10" in text
    assert "step=5 reward=0.750 lag=2" in text
