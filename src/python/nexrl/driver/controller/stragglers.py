"""Stragglers: a training task running far past the others gets a second copy.

A rollout task that runs much longer than its peers (a slow node, a worker that
swaps, a request stuck behind a long generation) holds a step back while the rest
of the cluster idles. With ``runtime_monitor.straggler_factor`` set (off by default:
a second copy costs the same compute again), a training task still running after
``factor`` times the median duration of the recent finished training tasks (and at
least ``runtime_monitor.straggler_min_s``) is submitted a second time, on another
worker. Whichever copy finishes first is taken and the other is cancelled; should
both have committed their groups, the pool delivers each group once (as for any
duplicate), so nothing is trained twice. ``rollout/stragglers_backed_up`` counts
the second copies.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Iterable
from typing import Any

__all__ = ["Stragglers"]


class Stragglers:
    """Which running training tasks are due a second copy (see the module doc).
    ``window`` finished durations are kept; none is due before ``min_samples``."""

    def __init__(
        self, factor: float, min_s: float, *, window: int = 64, min_samples: int = 4
    ) -> None:
        self.factor, self.min_s, self.min_samples = factor, min_s, min_samples
        self._durations: collections.deque[float] = collections.deque(maxlen=window)

    @property
    def enabled(self) -> bool:
        return self.factor > 0

    def finished(self, seconds: float) -> None:
        """A training task finished after ``seconds`` (its first copy's submission)."""
        self._durations.append(seconds)

    def threshold_s(self) -> float | None:
        """How long a training task may run before it is due; None: not yet known."""
        if not self.enabled or len(self._durations) < self.min_samples:
            return None
        return max(self.min_s, self.factor * statistics.median(self._durations))

    def due(self, tasks: Iterable[Any], now: float) -> list[Any]:
        """The training tasks of ``tasks`` (``Task``) running past the threshold that
        have no second copy yet."""
        limit = self.threshold_s()
        if limit is None:
            return []
        return [
            t for t in tasks if t.tag == "train" and not t.backed_up and now - t.submitted > limit
        ]
