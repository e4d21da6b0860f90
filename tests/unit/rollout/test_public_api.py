"""What a custom rollout worker or evaluator imports, from the package a user sees."""

from __future__ import annotations

import subprocess
import sys


def test_worker_classes_import_from_the_package() -> None:
    from nexrl import rollout_worker
    from nexrl.core.types.episode import Episode as TypesEpisode
    from nexrl.rollout.worker.base import BaseRolloutWorker as Base
    from nexrl.rollout_worker import BaseRolloutWorker, Episode, SimpleRolloutWorker

    assert BaseRolloutWorker is Base and Episode is TypesEpisode
    assert issubclass(SimpleRolloutWorker, BaseRolloutWorker)
    assert set(rollout_worker.__all__) >= {"BaseRolloutWorker", "SimpleRolloutWorker", "Evaluator"}


def test_the_evaluator_api_does_not_import_the_workers() -> None:
    code = (
        "import sys; from nexrl.rollout_worker import Evaluator; "
        "print('nexrl.rollout.worker.base' in sys.modules, 'openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
