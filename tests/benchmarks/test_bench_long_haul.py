"""The long-haul run (issue 48): the default recipe at the e2e size for
``NEXRL_LONG_HAUL_STEPS`` steps (default 10,000; ~1 h on the 2-core VM), sampled every
100 steps by ``bench.long_haul``: each process's RSS, open files and threads, the run
folder's disk use per folder, the step time. Its baseline is the run's own early
samples: each series' growth per 1,000 steps over the second half is recorded
(``extra_info``), and the figure and samples are written to ``NEXRL_TEST_ARTIFACTS``
when set. docs/benchmarks.md ("Long haul") has the numbers and the figure.

Long: it runs only with ``NEXRL_BENCH_LONG=1``. It asserts what a user relies on (the
run finishes, every step is logged once), not a speed or a memory limit.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.long_haul import growth, plot_samples, run_long_haul
from tests.e2e._recipe import subprocess_env, train_rows

STEPS = int(os.environ.get("NEXRL_LONG_HAUL_STEPS", "10000"))
EVERY = 100

pytestmark = pytest.mark.skipif(
    os.environ.get("NEXRL_BENCH_LONG") != "1",
    reason="a long benchmark (~1 h on 2 cores): set NEXRL_BENCH_LONG=1 to run it",
)


def test_bench_long_haul(benchmark: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    samples = benchmark.pedantic(
        lambda: run_long_haul(out, STEPS, EVERY, env=subprocess_env()), rounds=1, iterations=1
    )
    assert [r["step"] for r in train_rows(out)] == list(range(1, STEPS + 1))
    assert len(samples) >= STEPS // EVERY - 2
    rates = growth(samples)
    benchmark.extra_info.update({f"per_1000_steps/{k}": v for k, v in rates.items()})
    benchmark.extra_info["first"] = samples[0]
    benchmark.extra_info["last"] = samples[-1]
    figure = plot_samples(samples, tmp_path / "long_haul.png", f"{STEPS} steps")
    keep = os.environ.get("NEXRL_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(figure, Path(keep) / "long_haul.png")
        shutil.copy(tmp_path / "run.samples.jsonl", Path(keep) / "long_haul.samples.jsonl")
    print(json.dumps(rates, indent=1))
