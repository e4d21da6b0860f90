"""The evaluator contract: ``evaluate(data, evaluation_target) -> EvaluationRunResult``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult

__all__ = ["BaseEvaluationTarget", "EvaluationRunResult", "Evaluator"]


class Evaluator(ABC):
    """Subclass and implement ``evaluate``; named in a recipe as
    ``rollout_worker.evaluator: "path/to/file.py:ClassName"`` (or pick one of the
    library's by name, ``rollout_worker.evaluator: exact_match``: ``nexrl.rollout.evaluators``).

    ``required_fields`` names the data-row fields ``evaluate`` reads (besides the
    prompt): ``--check`` reads the first rows of every data file and reports a row
    that lacks one, with its file and row number."""

    @property
    def required_fields(self) -> tuple[str, ...]:
        """The data-row fields ``evaluate`` reads; a subclass may set a class attribute."""
        return ()

    @abstractmethod
    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        """Score one rollout of ``data`` (the original data row)."""
