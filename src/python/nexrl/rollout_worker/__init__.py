"""Rollout workers and the evaluator API recipes implement.

    from nexrl.rollout_worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult
    from nexrl.rollout_worker import BaseRolloutWorker, SimpleRolloutWorker, Episode

A custom rollout worker subclasses ``BaseRolloutWorker`` (or
``SimpleRolloutWorker``) and is named in a recipe as
``rollout_worker.custom_worker: "path/to/file.py:ClassName"``; its hooks are
listed in ``nexrl.rollout_worker.base``. The worker classes are imported on first
use, so an evaluator file that imports only the evaluator API stays light.
"""

from typing import TYPE_CHECKING, Any

from nexrl.rollout_worker.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator

if TYPE_CHECKING:
    from nexrl.rollout_worker.base import BaseRolloutWorker, Episode
    from nexrl.rollout_worker.simple import SimpleRolloutWorker

__all__ = [
    "BaseEvaluationTarget",
    "BaseRolloutWorker",
    "Episode",
    "EvaluationRunResult",
    "Evaluator",
    "SimpleRolloutWorker",
]

_LAZY = {
    "BaseRolloutWorker": "nexrl.rollout_worker.base",
    "Episode": "nexrl.rollout_worker.base",
    "SimpleRolloutWorker": "nexrl.rollout_worker.simple",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'nexrl.rollout_worker' has no attribute {name!r}")
