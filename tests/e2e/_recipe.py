"""Shared settings for end-to-end runs of the default recipe: small and quick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import _launch

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"
DATA = "recipes/max_digit/data/train.jsonl"


def overrides(out: Path, *extra: str, steps: int = 3) -> list[str]:
    """A short run: 4 groups of 8 per step, 2 workers, a private dashboard port."""
    return [
        f"output_dir={out}",
        f"trainer.total_train_steps={steps}",
        "trajectory_pool.batch_size=32",
        "trainer.micro_batch_size=32",
        "trainer.save_every=0",
        "validate.validate_before_train=false",
        "validate.every=0",
        "cluster.n_workers=2",
        "cluster.dashboard_address=127.0.0.1:0",
        "runtime_monitor.health_check_interval_s=1",
        *extra,
    ]


def read_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # a torn last line while the run writes
    return rows


def train_rows(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_rows(out) if "reward/mean" in r]


def subprocess_env() -> dict[str, str]:
    """The child imports what this interpreter imports (a Pants sandbox has no site dir)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DS_ACCELERATOR": "cpu"}


def train_recipe(recipe: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``nexrl train`` of ``recipe`` as it is (its own steps and settings) into ``out``;
    fails the test with the end of stderr unless it exits 0."""
    proc = _launch.run(
        [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            recipe,
            f"output_dir={out}",
            "cluster.dashboard_address=127.0.0.1:0",
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
