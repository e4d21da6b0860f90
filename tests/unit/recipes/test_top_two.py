"""recipes/top_two (docs/user-guide.md, "When it does not learn"): data, evaluators
and the recipes of its remedies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.plugins import load_object
from nexrl.driver.modeling.tiny import save_tiny_model
from nexrl.driver.recipe import load_recipe_checked
from nexrl.rollout_worker import BaseEvaluationTarget

ROOTS = [Path.cwd()]
ROW = {"prompt": "top 4 3 9", "answer": "94"}


def evaluator(name: str) -> Any:
    return load_object("recipes/top_two/evaluator.py", name, ROOTS, "test")()


@pytest.mark.parametrize(
    ("reply", "exact", "partial", "first", "form"),
    [
        ("94", 1.0, 1.0, 1.0, 1.0),
        ("93", 0.0, 0.5, 1.0, 1.0),
        ("49", 0.0, 0.0, 0.0, 1.0),
        ("34", 0.0, 0.5, 0.0, 1.0),
        ("9", 0.0, 0.5, 1.0, 0.0),
        ("9 4", 0.0, 0.5, 1.0, 0.0),  # a space is not the answer
        ("", 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_rewards_and_metrics(
    reply: str, exact: float, partial: float, first: float, form: float
) -> None:
    target = BaseEvaluationTarget(final_answer=reply)
    result = evaluator("TopTwoEvaluator").evaluate(ROW, target)
    assert result.reward == exact
    assert result.metrics == {"first_right": first, "form_right": form}
    shaped = evaluator("TopTwoPartialEvaluator").evaluate(ROW, target)
    assert shaped.reward == partial
    assert shaped.metrics == {"first_right": first, "form_right": form, "exact": exact}


def rows(name: str) -> list[dict[str, Any]]:
    return [
        json.loads(x) for x in Path(f"recipes/top_two/data/{name}.jsonl").read_text().splitlines()
    ]


def test_shipped_data_is_right_and_held_out() -> None:
    train, test, demos = rows("train"), rows("test"), rows("demos")
    assert (len(train), len(test), len(demos)) == (210, 49, 70)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for r in train + test:
        digits = sorted(map(int, r["prompt"].split()[1:]), reverse=True)
        assert r["answer"] == f"{digits[0]}{digits[1]}", r
    shown = {(d["messages"][0]["content"], d["messages"][1]["content"]) for d in demos}
    assert shown <= {(r["prompt"], r["answer"]) for r in train}  # demonstrations: training prompts


def test_the_remedy_recipes_differ_from_the_default_only_where_the_guide_says(
    tmp_path: Path,
) -> None:
    base = load_recipe_checked("recipes/top_two/top_two_tiny.yaml").cfg
    assert base.rollout_worker.max_response_length == 2
    stage1 = load_recipe_checked("recipes/top_two/top_two_stage1.yaml").cfg
    assert stage1.rollout_worker.evaluator.endswith(":TopTwoPartialEvaluator")
    snapshot = tmp_path / "snapshot"  # a model folder, as an SFT or stage-1 snapshot is
    save_tiny_model(snapshot, vocab=list(base.model.tiny.vocab))
    for name in ("top_two_stage2", "top_two_from_sft"):
        cfg = load_recipe_checked(f"recipes/top_two/{name}.yaml", [f"model.path={snapshot}"]).cfg
        assert cfg.rollout_worker.evaluator == base.rollout_worker.evaluator  # exact only
        assert cfg.trainer.lr == 1e-3 < base.trainer.lr  # a warm start: a lower lr
        assert cfg.model.path == str(snapshot)
    sft = load_recipe_checked("recipes/top_two/top_two_sft.yaml").cfg
    assert sft.mode == "sft" and list(sft.data.data_files) == ["recipes/top_two/data/demos.jsonl"]
