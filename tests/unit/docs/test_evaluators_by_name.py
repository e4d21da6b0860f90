"""The user guide's "Evaluators by name": its blocks run as written and its table lists
every registered evaluator with exactly its options."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from nexrl.driver.recipe import load_recipe_checked
from nexrl.rollout.evaluators import EVALUATORS

GUIDE = Path("docs/user-guide.md")


def section() -> str:
    text = GUIDE.read_text()
    start = text.index("### Evaluators by name")
    return text[start : text.index("\n## ", start)]


def test_the_python_block_runs() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", section(), re.S)
    exec(compile(block, "user-guide: Evaluators by name", "exec"), {})


def test_the_recipe_lines_pass_check_on_the_default_recipe() -> None:
    (block,) = re.findall(r"```yaml\n(.*?)```", section(), re.S)
    shown: Any = OmegaConf.to_container(OmegaConf.create(block))
    rw = shown["rollout_worker"]
    options = ", ".join(f"{k}: {v}" for k, v in rw["evaluator_options"].items())
    recipe = load_recipe_checked(
        "recipes/max_digit/max_digit_tiny.yaml",
        [
            f"rollout_worker.evaluator={rw['evaluator']}",
            f"rollout_worker.evaluator_options={{{options}}}",
        ],
    )
    assert (
        OmegaConf.to_container(recipe.cfg.rollout_worker.evaluator_options)
        == (rw["evaluator_options"])
    )


def test_the_table_lists_every_evaluator_and_exactly_its_options() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$", section(), re.M)
    assert sorted(name for name, *_ in rows) == EVALUATORS.names()
    for name, options, _fields, _what in rows:
        listed = re.findall(r"(?:^|, )`(\w+)`", options)
        fields = [f.name for f in dataclasses.fields(EVALUATORS.get(name).Options)]
        assert listed == fields, name
