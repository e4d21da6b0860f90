"""The evaluator contract: ``evaluate(data, evaluation_target) -> EvaluationRunResult``."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BaseEvaluationTarget:
    """What the rollout produced.

    Attributes:
        final_answer: the model's final output text.
        observation: the trace (messages / tool calls) that led to it.
    """

    final_answer: str
    observation: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EvaluationRunResult:
    """An evaluator's verdict.

    Attributes:
        reward: the RL signal (a finite float).
        ground_truth: the reference answer, for logs.
        metrics: extra float metrics, averaged per step in the logs.
        extra_info: anything else (kept with the trajectory).
    """

    reward: float
    ground_truth: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    extra_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.reward, bool) or not isinstance(self.reward, int | float):
            raise TypeError(f"EvaluationRunResult.reward must be a float, got {self.reward!r}")
        if not math.isfinite(self.reward):
            raise ValueError(f"EvaluationRunResult.reward must be finite, got {self.reward!r}")
        self.reward = float(self.reward)


class Evaluator(ABC):
    """Subclass and implement ``evaluate``; named in a recipe as
    ``rollout_worker.evaluator: "path/to/file.py:ClassName"``."""

    @abstractmethod
    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        """Score one rollout of ``data`` (the original data row)."""
