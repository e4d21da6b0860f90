"""Reward 1 when the model's answer is exactly the expected digits ("94" for
"top 4 3 9"), 0 otherwise; the metrics split what it got right."""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator


class TopTwoEvaluator(Evaluator):
    """Compares the digits of the reply with the ``answer`` field's digits.

    Metrics (``eval/<name>`` per step, ``val/eval/<name>`` in validation):
    ``first_right``: the first digit is right (the largest digit); ``form_right``:
    the reply has as many digits as the answer, and nothing else.
    """

    required_fields = ("answer",)

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        answer = str(data["answer"])
        reply = evaluation_target.final_answer.strip()
        digits = [c for c in reply if c.isdigit()]
        return EvaluationRunResult(
            reward=1.0 if reply == answer else 0.0,
            ground_truth=answer,
            metrics={
                "first_right": float(bool(digits) and digits[0] == answer[0]),
                "form_right": float(len(digits) == len(answer) == len(reply)),
            },
        )


class TopTwoPartialEvaluator(TopTwoEvaluator):
    """Partial credit for progress toward the answer (the curriculum's first stage,
    top_two_stage1.yaml): 0.5 for each digit right in its place, so a sample with
    one digit right already scores (``exact`` is the full task's reward)."""

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        result = super().evaluate(data, evaluation_target)
        answer = str(data["answer"])
        reply = evaluation_target.final_answer.strip()
        right = sum(a == b for a, b in zip(reply, answer, strict=False))
        metrics = {**result.metrics, "exact": result.reward}
        return EvaluationRunResult(reward=right / len(answer), ground_truth=answer, metrics=metrics)
