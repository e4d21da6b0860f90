"""bench.long_haul's growth rates and its reading of metrics.jsonl's tail, against
hand-computed fixtures (the long-haul numbers in docs/benchmarks.md are these)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.long_haul import growth, last_step


def _sample(step: int, rss: int, pool: int, step_s: float) -> dict:
    return {
        "step": step,
        "step_s": step_s,
        "procs": {"driver": {"rss": rss, "fds": 50, "threads": 20}},
        "disk": {"pool.zarr": pool, "checkpoints": 7, "snapshots": 0, "logs": 0},
    }


def test_growth_is_the_second_half_slope_per_1000_steps() -> None:
    # rss: flat at 100 for the first half (warm-up 90 -> 100 left out), then +2 per 100
    # steps -> 20 per 1000; pool: 5 bytes per step -> 5000 per 1000; fds, checkpoints: 0
    samples = [_sample(100, 90, 500, 0.3), _sample(200, 100, 1000, 0.2)]
    samples += [_sample(s, 100 + 2 * (s - 300) // 100, 5 * s, 0.2) for s in (300, 400, 500, 600)]
    rates = growth(samples)  # the second half: steps 400, 500, 600 (rss 102, 104, 106)
    assert rates["driver/rss"] == pytest.approx(20.0)
    assert rates["disk/pool.zarr"] == pytest.approx(5000.0)
    assert rates["driver/fds"] == 0.0 and rates["disk/checkpoints"] == 0.0
    assert rates["step_s"] == pytest.approx(0.0)


def test_too_few_samples_give_no_rates() -> None:
    assert growth([_sample(100, 1, 1, 0.1)] * 3) == {}


def test_last_step_reads_the_last_complete_row(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    assert last_step(metrics) == 0  # no file yet
    rows = [json.dumps({"step": s, "reward/mean": 0.5, "pad": "x" * 3000}) for s in range(1, 40)]
    metrics.write_text("\n".join(rows) + '\n{"step": 40, "rew')  # a torn last line
    assert last_step(metrics) == 39
