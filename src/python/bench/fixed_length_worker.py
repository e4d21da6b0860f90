"""A ``simple`` rollout worker whose answers are always ``max_response_length``
tokens: every request carries ``ignore_eos`` (the embedded server, like vLLM,
then samples on past an end-of-sequence token). The generation-heavy runs
(``bench.generation_heavy``) use it as
``rollout_worker.custom_worker=src/python/bench/fixed_length_worker.py:FixedLengthWorker``.
"""

from __future__ import annotations

from typing import Any

from nexrl.rollout.worker.simple import SimpleRolloutWorker


class FixedLengthWorker(SimpleRolloutWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling["ignore_eos"] = True
