"""The run's first lines name the rollout worker and evaluator classes it loads and
where from: the built-in type, a custom worker file, or a module."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.driver.controller.setup import loaded_classes_line
from nexrl.driver.recipe import load_recipe_checked

MAX_DIGIT = Path("recipes/max_digit/max_digit_tiny.yaml").resolve()

TASK = """
from nexrl.rollout_worker import EvaluationRunResult, Evaluator, SimpleRolloutWorker


class Scored(Evaluator):
    def evaluate(self, data, evaluation_target):
        return EvaluationRunResult(reward=float(evaluation_target.final_answer == data["answer"]))


class Worker(SimpleRolloutWorker):
    pass
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    """The default recipe with a task.py (``Scored``, ``Worker``) beside a copy of it."""
    (tmp_path / "task.py").write_text(TASK)
    path = tmp_path / "r.yaml"
    text = MAX_DIGIT.read_text().replace("recipes/max_digit/", f"{MAX_DIGIT.parent}/")
    path.write_text(text)
    return path


def test_built_in_worker_and_the_evaluator_file() -> None:
    line = loaded_classes_line(load_recipe_checked(MAX_DIGIT))
    evaluator = MAX_DIGIT.parent.resolve() / "evaluator.py"
    assert line == (
        "rollout worker: built-in type 'simple' (rollout_worker.type); "
        f"evaluator: MaxDigitEvaluator ({evaluator})"
    )


def test_custom_worker_file_is_named_with_its_path(recipe: Path) -> None:
    loaded = load_recipe_checked(recipe, ["rollout_worker.custom_worker=task.py:Worker"])
    line = loaded_classes_line(loaded)
    task = recipe.parent.resolve() / "task.py"
    assert line.startswith(f"rollout worker: Worker ({task}) (rollout_worker.custom_worker); ")


def test_an_evaluator_from_a_module_is_named_as_a_module(
    recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(recipe.parent))  # task.py importable as module 'task'
    loaded = load_recipe_checked(recipe, ["rollout_worker.evaluator=task:Scored"])
    assert loaded_classes_line(loaded).endswith("evaluator: Scored (module task)")
