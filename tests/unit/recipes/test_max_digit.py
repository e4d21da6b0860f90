"""The default recipe's task: data and evaluator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexrl.core.plugins import load_object
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


def _rows(name: str) -> list[dict[str, Any]]:
    path = Path(f"recipes/max_digit/data/{name}.jsonl")
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_shipped_data_is_correct_distinct_and_held_out() -> None:
    train, test = _rows("train"), _rows("test")
    assert len(train) == 210 and len({r["prompt"] for r in train}) == 210
    assert len(test) == 49 and len({r["prompt"] for r in test}) == 49
    # balanced answers: every largest digit 3..9 equally often in both splits
    for part, n in ((train, 30), (test, 7)):
        counts = {a: sum(r["answer"] == a for r in part) for a in "3456789"}
        assert set(counts.values()) == {n}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for r in [*train, *test]:
        digits = [int(x) for x in r["prompt"].split()[1:]]
        assert r["answer"] == str(max(digits))
