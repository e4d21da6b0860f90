"""The default recipe's task: data and evaluator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexrl.config.modules import load_object
from nexrl.rollout_worker import BaseEvaluationTarget

ROOTS = [Path.cwd()]


def evaluator() -> Any:
    cls = load_object("recipes/max_digit/evaluator.py", "MaxDigitEvaluator", ROOTS, "test")
    return cls()


def test_rewards_the_largest_digit_only() -> None:
    ev = evaluator()
    row = {"prompt": "max 4 3 9", "answer": "9"}
    assert ev.evaluate(row, BaseEvaluationTarget(final_answer="9")).reward == 1.0
    assert ev.evaluate(row, BaseEvaluationTarget(final_answer="4")).reward == 0.0
    assert ev.evaluate(row, BaseEvaluationTarget(final_answer="")).reward == 0.0
    result = ev.evaluate(row, BaseEvaluationTarget(final_answer="max 9"))
    assert result.reward == 0.0 and result.metrics == {"answered_a_digit": 0.0}


def test_shipped_data_is_correct_and_distinct() -> None:
    rows = [
        json.loads(x) for x in Path("recipes/max_digit/data/train.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 1000 and len({r["prompt"] for r in rows}) == 1000
    for r in rows:
        digits = [int(x) for x in r["prompt"].split()[1:]]
        assert r["answer"] == str(max(digits))
