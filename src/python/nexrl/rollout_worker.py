"""The evaluator and rollout-worker API, at the path NexRL's user guide documents.

    from nexrl.rollout_worker import Evaluator, BaseEvaluationTarget, EvaluationRunResult
    from nexrl.rollout_worker import BaseRolloutWorker, SimpleRolloutWorker, Episode

Recipe files (evaluators, custom workers) import from here, so an evaluator
written for NexRL runs unchanged. The code is the rollout wing's
``nexrl.rollout.worker``; the worker classes load on first use, so an evaluator
file that imports only the evaluator API stays light.
"""

from typing import Any

from nexrl.rollout import worker as _worker

__all__ = list(_worker.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_worker, name)
