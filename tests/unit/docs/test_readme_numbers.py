"""The README says in one sentence what the default recipe does and names the floor CI
asserts (tests/e2e/test_default_recipe_learns.py); what was measured (which run, which
seeds, the spread of fresh runs) is on the benchmarks page, not only the best run."""

from __future__ import annotations

import re
from pathlib import Path


def _paragraph(path: str, start: str) -> str:
    text = Path(path).read_text()
    i = text.index(start)
    return " ".join(text[i : text.index("\n\n", i)].split())


def test_the_readme_floor_is_the_one_ci_asserts() -> None:
    """The acceptance of tests/e2e/test_default_recipe_learns.py (last 5 >= 0.8,
    validation up by >= 0.4), which the README names as what CI asserts."""
    para = _paragraph("README.md", "It builds a tiny model from config")
    assert "about 0.9-1.0" in para
    floor = re.search(r"last-5 reward >= ([\d.]+), validation up by >= ([\d.]+)", para)
    assert floor, para
    assert (float(floor.group(1)), float(floor.group(2))) == (0.8, 0.4)
    assert "tests/e2e/test_default_recipe_learns.py" in para


def test_the_benchmarks_page_states_the_seeds_and_the_spread_it_measured() -> None:
    para = _paragraph("docs/benchmarks.md", "`recipes/max_digit/max_digit_tiny.yaml` as shipped")
    assert "seed=42" in para and "0.90-0.94" in para
    assert "(0-5, 7, 9)" in para  # which seeds the across-seed numbers are for
    assert "not the whole stack" in para  # not a claim about the whole stack
