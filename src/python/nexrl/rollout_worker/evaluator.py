"""The evaluator contract: ``evaluate(data, evaluation_target) -> EvaluationRunResult``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from nexrl.types.episode import BaseEvaluationTarget, EvaluationRunResult

__all__ = ["BaseEvaluationTarget", "EvaluationRunResult", "Evaluator"]


class Evaluator(ABC):
    """Subclass and implement ``evaluate``; named in a recipe as
    ``rollout_worker.evaluator: "path/to/file.py:ClassName"``."""

    @abstractmethod
    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        """Score one rollout of ``data`` (the original data row)."""
