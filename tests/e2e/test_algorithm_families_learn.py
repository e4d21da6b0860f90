"""Each algorithm family learns the default task (recipes/max_digit) in a short run:
GRPO, Dr.GRPO, RLOO, REINFORCE++, GSPO and DAPO (dynamic sampling), chosen by recipe
overrides only (``tests/e2e/_algorithm_families.py``; the measured curves are in
docs/benchmarks.md). 30 steps of 8 prompts x 8 samples each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._algorithm_families import FAMILIES, STEPS, gain, run_family

# measured gains (last 5 - first 5 steps) are in docs/benchmarks.md; this is well below
MIN_GAIN = 0.2


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_learns(tmp_path: Path, family: str) -> None:
    rows = run_family(family, tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    first, last = gain(rows)
    assert last - first >= MIN_GAIN, (family, first, last)
    if family == "dapo":
        assert sum(r["filter/dropped_groups"] for r in rows) > 0
        assert all(r["reward/std"] > 0 for r in rows)
