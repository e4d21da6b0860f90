"""Rollout workers and the evaluator API recipes implement.

from nexrl.rollout_worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult
"""

from nexrl.rollout_worker.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator

__all__ = ["BaseEvaluationTarget", "EvaluationRunResult", "Evaluator"]
