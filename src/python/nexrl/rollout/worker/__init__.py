"""Rollout workers and the evaluator API recipes implement.

Recipe files import this API from ``nexrl.rollout_worker`` (NexRL's documented
path, which reads it from here):

    from nexrl.rollout_worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult
    from nexrl.rollout_worker import BaseRolloutWorker, SimpleRolloutWorker, Episode

A custom rollout worker subclasses ``BaseRolloutWorker`` (or
``SimpleRolloutWorker``) and is named in a recipe as
``rollout_worker.custom_worker: "path/to/file.py:ClassName"``; its hooks are
listed in ``nexrl.rollout.worker.base``. The worker classes are imported on first
use, so an evaluator file that imports only the evaluator API stays light.
"""

from typing import TYPE_CHECKING

from nexrl.core.util.lazy import lazy_names
from nexrl.rollout.worker.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator

if TYPE_CHECKING:
    from nexrl.rollout.worker.base import BaseRolloutWorker, Episode
    from nexrl.rollout.worker.simple import SimpleRolloutWorker

__all__ = [
    "BaseEvaluationTarget",
    "BaseRolloutWorker",
    "Episode",
    "EvaluationRunResult",
    "Evaluator",
    "SimpleRolloutWorker",
]

__getattr__ = lazy_names(
    __name__, {"BaseRolloutWorker": "base", "Episode": "base", "SimpleRolloutWorker": "simple"}
)
