"""Reward 1 when the agent's final answer is the sum; the trace shows whether it used the tool."""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator


class SumEvaluator(Evaluator):
    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        answer = str(data["answer"])
        words = evaluation_target.final_answer.split()
        used_tool = any(m.get("role") == "tool" for m in evaluation_target.observation)
        return EvaluationRunResult(
            reward=1.0 if words and words[-1] == answer else 0.0,
            ground_truth=answer,
            metrics={"used_tool": float(used_tool)},
        )
