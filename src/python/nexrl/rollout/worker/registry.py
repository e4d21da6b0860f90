"""Rollout-worker types by ``rollout_worker.type``: a registered name or a class.

``ROLLOUT_WORKERS`` holds the built-ins (``simple``, ``agent``,
``openai_agent``, registered lazily: a worker's module is imported when a
recipe picks it); a plugin adds its own with
``@ROLLOUT_WORKERS.register("name")``, and a recipe may name a class directly,
``rollout_worker.type: path/to/file.py:ClassName``. Every entry is a
``BaseRolloutWorker`` subclass; it builds itself for a run with the classmethod
``from_spec(spec, client, evaluator, recorder)``.
"""

from __future__ import annotations

from pathlib import Path

from nexrl.core.plugins import Registry, load_object
from nexrl.rollout.worker.base import BaseRolloutWorker
from nexrl.rollout.worker.cache import process_cached
from nexrl.rollout.worker.spec import RolloutSpec

__all__ = ["CUSTOM_FIELD", "FIELD", "ROLLOUT_WORKERS", "worker_class"]

FIELD = "rollout_worker.type"
CUSTOM_FIELD = "rollout_worker.custom_worker"  # the older form of a class in 'type'

ROLLOUT_WORKERS: Registry[type[BaseRolloutWorker]] = Registry(
    "rollout worker type", base=BaseRolloutWorker, field=FIELD
)
ROLLOUT_WORKERS.register_lazy("simple", "nexrl.rollout.worker.simple:SimpleRolloutWorker")
ROLLOUT_WORKERS.register_lazy("agent", "nexrl.rollout.worker.agent.worker:AgentRolloutWorker")
ROLLOUT_WORKERS.register_lazy(
    "openai_agent", "nexrl.rollout.worker.openai_agent.worker:OpenAIAgentWorker"
)


def worker_class(spec: RolloutSpec) -> type[BaseRolloutWorker]:
    """The rollout worker class the recipe names (``custom_worker``, else ``type``)."""
    custom = spec.custom_worker
    if custom is None:
        return process_cached(
            ("worker", spec.worker_type, *spec.roots),
            lambda: ROLLOUT_WORKERS.get(spec.worker_type, roots=spec.roots),
        )
    cls = process_cached(
        ("worker", *custom, *spec.roots),
        lambda: load_object(custom[0], custom[1], [Path(r) for r in spec.roots], CUSTOM_FIELD),
    )
    if not (isinstance(cls, type) and issubclass(cls, BaseRolloutWorker)):
        raise TypeError(
            f"{CUSTOM_FIELD}: {cls!r} is not a subclass "
            "of nexrl.rollout.worker.base.BaseRolloutWorker"
        )
    return cls
