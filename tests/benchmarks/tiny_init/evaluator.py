"""Evaluators of the tiny-model init benchmark's tasks (make_data.py): the reply
against the ``answer`` field, exactly ("349" for "sort 4 3 9", "1" for "sum 47").

``ExactMatchEvaluator`` rewards the exact answer only; ``PerDigitEvaluator`` gives
partial credit per digit in its place (as recipes/top_two's TopTwoPartialEvaluator),
for RL on the three-digit answers, where a random tiny policy is almost never exactly
right and GRPO would have nothing to learn from. Both report ``exact`` (the
exact-match reward) as a metric: ``val/eval/exact`` at each validation.
"""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator


class ExactMatchEvaluator(Evaluator):
    """Reward 1 when the reply (stripped) is the answer, 0 otherwise.

    Metrics: ``exact`` (the reward), ``first_right`` (the reply's first character is
    the answer's), ``form_right`` (as many digits as the answer, nothing else).
    """

    required_fields = ("answer",)

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        answer = str(data["answer"])
        reply = evaluation_target.final_answer.strip()
        exact = 1.0 if reply == answer else 0.0
        digits = [c for c in reply if c.isdigit()]
        return EvaluationRunResult(
            reward=exact,
            ground_truth=answer,
            metrics={
                "exact": exact,
                "first_right": float(reply[:1] == answer[:1]),
                "form_right": float(len(digits) == len(answer) == len(reply)),
            },
        )


class PerDigitEvaluator(ExactMatchEvaluator):
    """Reward = the share of the answer's digits that the reply has in their place
    ("359" for "349": 2/3); ``exact`` stays the exact match."""

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        result = super().evaluate(data, evaluation_target)
        answer = str(data["answer"])
        reply = evaluation_target.final_answer.strip()
        right = sum(a == b for a, b in zip(reply, answer, strict=False))
        return EvaluationRunResult(
            reward=right / len(answer), ground_truth=answer, metrics=result.metrics
        )
