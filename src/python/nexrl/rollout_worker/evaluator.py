"""The evaluator contract (``nexrl.types.evaluator``), where recipes import it from:
``from nexrl.rollout_worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult``."""

from nexrl.types.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator

__all__ = ["BaseEvaluationTarget", "EvaluationRunResult", "Evaluator"]
