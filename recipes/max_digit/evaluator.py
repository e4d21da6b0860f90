"""Reward 1 when the model's answer is the largest of the three digits."""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator


class MaxDigitEvaluator(Evaluator):
    required_fields = ("answer",)  # the data fields evaluate() reads: --check looks for them

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        answer = str(data["answer"])
        words = evaluation_target.final_answer.split()
        first = words[0] if words else ""
        return EvaluationRunResult(
            reward=1.0 if first == answer else 0.0,
            ground_truth=answer,
            metrics={"answered_a_digit": float(first.isdigit())},
        )
