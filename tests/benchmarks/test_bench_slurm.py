"""The default recipe on Slurm vs on a LocalCluster: start-up and steps/s.

Same machine, same recipe, same run length, one after the other in one session
(needs the test Slurm: ``sudo build-support/slurm.sh start``):

* **local** (baseline): ``cluster.type=local`` with 2 worker processes; the
  embedded server a child of the driver.
* **slurm**: ``cluster.type=slurm`` with 2 rollout jobs, 1 trainer job and 1
  inference job on a one-node Slurm (the same 2 cores).

Each variant records in ``extra_info``: seconds from the start of the run to
its first metrics row (``startup_s``: for Slurm, submitting and starting the
jobs; for both, building the model and starting the server) and steps per
second after the first step (``steps_per_s``); the Slurm one also records both
ratios to the local run (``startup_ratio``, ``speed_ratio``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.integration.slurm._slurm import SLURM_RUN, require_slurm

# Long (~2 min on the 2-core CI machine, inside CI's 90-minute budget): it runs only
# with NEXRL_BENCH_LONG=1, like the other long benchmarks; its numbers are in
# docs/benchmarks.md. What it runs is tested in CI by the integration and e2e tests.
pytestmark = pytest.mark.skipif(
    os.environ.get("NEXRL_BENCH_LONG") != "1",
    reason="a long benchmark (~2 min on 2 cores): set NEXRL_BENCH_LONG=1 to run it",
)

STEPS = 12
_seen: dict[str, dict[str, float]] = {}


def _timed_run(out: Path, extra: list[str]) -> dict[str, float]:
    recipe = load_recipe_checked(RECIPE, overrides(out, *extra, steps=STEPS))
    stamps: dict[int, float] = {}
    done = threading.Event()

    def watch() -> None:  # when each metrics row appears
        while not done.is_set():
            for row in train_rows(out):
                stamps.setdefault(int(row["step"]), time.perf_counter())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    start = time.perf_counter()
    watcher.start()
    result = Controller(recipe, progress=False).run()
    done.set()
    watcher.join(timeout=5)
    for row in train_rows(out):
        stamps.setdefault(int(row["step"]), time.perf_counter())
    assert result.steps == STEPS
    return {
        "startup_s": stamps[1] - start,
        "steps_per_s": (STEPS - 1) / (stamps[STEPS] - stamps[1]),
    }


@pytest.mark.parametrize("where", ["local", "slurm"])
def test_bench_default_recipe_on_slurm_vs_local(benchmark: Any, where: str, tmp_path: Path) -> None:
    if where == "slurm":
        require_slurm()
    extra = SLURM_RUN if where == "slurm" else []
    seen = benchmark.pedantic(lambda: _timed_run(tmp_path / where, extra), rounds=1, iterations=1)
    _seen[where] = seen
    benchmark.extra_info.update(seen)
    if where == "slurm" and "local" in _seen:
        base = _seen["local"]
        benchmark.extra_info["startup_ratio"] = seen["startup_s"] / base["startup_s"]
        benchmark.extra_info["speed_ratio"] = seen["steps_per_s"] / base["steps_per_s"]
    assert seen["startup_s"] > 0 and seen["steps_per_s"] > 0
