"""What a person at a terminal sees: ``nexrl train`` on a real pseudo-terminal.

The default recipe for 2 steps, the CLI in a child process whose stdin, stdout and
stderr are a new pseudo-terminal (as a shell's are): a progress bar with the
step, ETA, reward and the evaluator's metric is drawn, and the summary is the
last thing printed (DeepSpeed builds no op for one CPU rank: no "built
successfully" line, neither after the summary nor in a worker's log).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests._terminal import run_on_a_terminal
from tests.e2e._recipe import RECIPE, overrides, subprocess_env


def _run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    return run_on_a_terminal(
        [sys.executable, "-m", "nexrl.driver.cli.train", *args], subprocess_env()
    )


def test_a_bar_with_eta_and_the_summary_last(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rc, text = _run_on_a_terminal([RECIPE, *overrides(out, steps=2)])
    assert rc == 0, text[-3000:]
    frames = [f.strip() for f in text.replace("\n", "\r").split("\r") if f.strip()]
    bar = [f for f in frames if f.startswith("train 2/2 |")]
    assert bar, text[-3000:]
    assert " eta " in bar[-1] and "reward=" in bar[-1] and "staleness=" in bar[-1]
    assert "answered_a_digit=" in bar[-1]  # the evaluator's metric (eval/answered_a_digit)
    assert any(f.startswith("train 1/2 |") for f in frames)
    assert not any(f.startswith("step 1/2") for f in frames)  # no plain lines on a terminal
    summary = frames.index(next(f for f in frames if f.startswith("steps: 2 (1 -> 2)")))
    assert [f.split(":")[0] for f in frames[summary:]] == [
        "steps",
        "reward (mean of 2 steps)",
        "learning signal",  # zero-variance groups and the top answer's share, first/last steps
    ]
    assert "built successfully" not in text
    assert "Loading weights" not in text  # no worker's progress bar beside ours
    logs = "".join(p.read_text() for p in (out / "logs").glob("dask-worker-*.log"))
    assert "built successfully" not in logs  # no C++ build for one CPU rank
