"""A short run of the default recipe with a named evaluator picked in the recipe
(``rollout_worker.evaluator: regex`` with ``evaluator_options``) instead of the
recipe's evaluator class: it trains, and the named evaluator's metrics reach
metrics.jsonl."""

from __future__ import annotations

from pathlib import Path

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows


def test_a_named_evaluator_from_the_recipe_scores_a_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "rollout_worker.evaluator=regex",
            "rollout_worker.evaluator_options={extract: last_number, reference_key: answer}",
            steps=2,
        ),
    )
    assert Controller(recipe, progress=False).run().steps == 2
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        # max_response_length 1: the one token is a digit (extracted) or 'max' (not)
        assert 0.0 <= row["eval/extracted"] <= 1.0
        assert row["eval/evaluator_error"] == 0.0
        assert 0.0 <= row["reward/mean"] <= row["eval/extracted"]
