"""The default recipe's evaluator, held at a gate for the dashboard's live test: once the
run's metrics.jsonl holds N steps (N: the number in the file named by
``$NEXRL_TEST_GATE``), each ``evaluate`` waits while that file exists (at most
``HOLD_S``), so the run is still going, by construction, while the browser reads its
live page. The test removes the file to let the run finish. A run needs ~3 s for 3 steps here: the browser's first page load
missed it (CI hung on the page until its deadline)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from nexrl.core.plugins.specs import load_spec

MaxDigitEvaluator = load_spec(
    "recipes/max_digit/evaluator.py:MaxDigitEvaluator", [Path.cwd()], "rollout_worker.evaluator"
)

GATE_ENV = "NEXRL_TEST_GATE"
HOLD_S = 600.0  # a test that never opens the gate fails its own deadline, not this


def close_after(gate: Path, steps: int) -> Path:
    """Make ``gate`` hold a run once it has logged ``steps`` steps."""
    gate.write_text(str(steps))
    return gate


def _held(gate: Path) -> bool:
    try:
        steps = int(gate.read_text())
    except (FileNotFoundError, ValueError):
        return False
    return _steps_logged(gate) >= steps


def _steps_logged(gate: Path) -> int:
    metrics = gate.with_name("run") / "metrics.jsonl"
    try:
        return sum(1 for line in metrics.read_text().splitlines() if '"reward/mean"' in line)
    except FileNotFoundError:
        return 0


class GatedMaxDigit(MaxDigitEvaluator):  # type: ignore[misc,valid-type]
    def evaluate(self, data: dict[str, Any], evaluation_target: Any) -> Any:
        gate = Path(os.environ.get(GATE_ENV, "/nonexistent/gate"))
        deadline = time.monotonic() + HOLD_S
        while _held(gate):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return super().evaluate(data, evaluation_target)
