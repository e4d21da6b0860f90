"""The evaluator contract (``nexrl.core.types.evaluator``), where recipes import it from:
``from nexrl.rollout.worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult``."""

from nexrl.core.types.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator

__all__ = ["BaseEvaluationTarget", "EvaluationRunResult", "Evaluator"]
