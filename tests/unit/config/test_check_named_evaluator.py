"""A named evaluator in a recipe: its options are checked and its data fields looked for
in the first rows of every data file before any cluster starts."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked


def rows(path: Path, items: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in items))


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    rows(tmp_path / "train.jsonl", [{"prompt": "a", "answer": "7", "gold": "7"}] * 3)
    path = tmp_path / "r.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            defaults: [nexrl_base, _self_]
            experiment_name: t
            model: {tiny: {vocab: [a, b]}}
            data: {data_files: [train.jsonl]}
            rollout_worker: {evaluator: numeric, group_size: 4, example_answer: "it is 7"}
            trajectory_pool: {key_list: [group_id], batch_size: 8}
            """
        )
    )
    return path


def problems_of(recipe: Path, *overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe, list(overrides))
    return info.value.problems


def test_a_named_evaluator_with_options_passes(recipe: Path) -> None:
    load_recipe_checked(
        recipe, ["+rollout_worker.evaluator_options={reference_key: gold, abs_tol: 0.5}"]
    )


def test_an_unknown_option_names_the_field_and_the_allowed_ones(recipe: Path) -> None:
    assert problems_of(recipe, "+rollout_worker.evaluator_options={tol: 0.5}") == [
        "rollout_worker.evaluator_options.tol: unknown option (allowed: reference_key, "
        "abs_tol, rel_tol, extract)"
    ]


def test_a_misspelt_name_lists_the_named_evaluators(recipe: Path) -> None:
    (p,) = problems_of(recipe, "rollout_worker.evaluator=numerik")
    assert p.startswith(
        "rollout_worker.evaluator: unknown evaluator 'numerik'; did you mean 'numeric'? "
    )


def test_rows_without_the_reference_field_the_options_name(recipe: Path) -> None:
    """Every row checked lacks the field (a renamed one): one line per file, its rows
    listed, not one line per row."""
    problems = problems_of(recipe, "+rollout_worker.evaluator_options={reference_key: label}")
    assert [p for p in problems if "no 'label' field" in p] == [
        "data.data_files: train.jsonl: 3 rows (line 1, line 2, line 3): no 'label' field, "
        "which rollout_worker.evaluator reads (its required_fields); fields: ['answer', "
        "'gold', 'prompt'] (in line 1)"
    ]


def test_options_with_an_evaluator_class_are_a_mistake(recipe: Path, tmp_path: Path) -> None:
    (tmp_path / "ev.py").write_text(Path("recipes/max_digit/evaluator.py").read_text())
    assert problems_of(
        recipe,
        "rollout_worker.evaluator=ev.py:MaxDigitEvaluator",
        "+rollout_worker.evaluator_options={abs_tol: 1}",
    ) == [
        "rollout_worker.evaluator_options: set, but rollout_worker.evaluator is a class "
        "('ev.py:MaxDigitEvaluator'); options apply to a named evaluator (a class reads its "
        "own settings)"
    ]


def test_a_sandbox_that_cannot_be_made_is_reported_not_skipped(recipe: Path) -> None:
    assert problems_of(
        recipe,
        "rollout_worker.evaluator=code_execution",
        "rollout_worker.evaluator_options={python: no-such-python}",
    ) == [
        "rollout_worker.evaluator: code_execution failed: SandboxUnavailable: "
        "code_execution sandbox: python 'no-such-python' not found in "
        "/usr/local/bin:/usr/bin:/bin"
    ]
