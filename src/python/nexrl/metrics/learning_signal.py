"""Is there anything to learn from? The per-step numbers of a run that does not learn,
and the warning lines that name the two common causes.

Each step's batch adds to its metrics row:

* ``rollout/zero_variance_groups``: the share of the batch's groups whose samples
  all got the same reward. GRPO's advantage ``(r - mean) / std`` is 0 for every
  sample of such a group (DeepSeekMath, Shao et al. 2024, eq. 3), so it adds no
  gradient: a batch of them teaches nothing, however long the run.
* ``rollout/distinct_answers``: distinct responses / samples (token for token).
* ``rollout/top_answer_share``: the share of samples that gave the batch's most
  common response. Near 1 across many prompts: the policy collapsed to one answer.

``LearningSignalWatch`` writes one warning line when either cause holds:

* **no signal**: at least ``NO_SIGNAL_SHARE`` of the groups had no reward variance
  for ``NO_SIGNAL_STEPS`` steps in a row, while the step's mean reward is below
  ``SOLVED_REWARD`` (a solved task also gives every sample the same reward);
* **collapse**: at least ``COLLAPSE_SHARE`` of a step's samples gave the same
  response, over at least ``MIN_GROUPS`` groups, and those samples' mean reward is
  below ``SOLVED_REWARD`` (one answer that is right for every prompt is not a
  collapse).

Each kind is written again only after ``REPEAT_AFTER`` steps. The remedies are in
docs/user-guide.md, "When it does not learn".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "GUIDE",
    "LearningSignalWatch",
    "answer_shares",
    "signal_metrics",
    "zero_variance_share",
]


GUIDE = 'see "When it does not learn" in docs/user-guide.md'
NO_SIGNAL_SHARE = 0.9
NO_SIGNAL_STEPS = 5
COLLAPSE_SHARE = 0.8
MIN_GROUPS = 4
SOLVED_REWARD = 0.95
REPEAT_AFTER = 50


def zero_variance_share(reward: np.ndarray, group_id: np.ndarray) -> float:
    """The share of groups (by ``group_id``) whose rewards are all equal."""
    if not len(reward):
        return 0.0
    _, inverse = np.unique(group_id, return_inverse=True)
    n = int(inverse.max()) + 1
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, inverse, reward)
    np.maximum.at(hi, inverse, reward)
    return float(np.mean(hi - lo == 0))


def answer_ids(response_ids: np.ndarray, response_lens: np.ndarray) -> np.ndarray:
    """One integer per sample, equal for samples with the same response tokens
    (the flat ragged ``response_ids`` padded with -1 into rows, then ``np.unique``)."""
    lens = np.asarray(response_lens, dtype=np.int64)
    n, width = len(lens), int(lens.max()) if len(lens) else 0
    rows = np.full((n, max(width, 1)), -1, dtype=np.int64)
    if width:
        starts = np.repeat(np.cumsum(lens) - lens, lens)
        cols = np.arange(int(lens.sum())) - starts
        rows[np.repeat(np.arange(n), lens), cols] = response_ids[: int(lens.sum())]
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    return np.asarray(inverse).reshape(-1)


def answer_shares(response_ids: np.ndarray, response_lens: np.ndarray) -> tuple[float, float]:
    """``(distinct responses / samples, the most common response's share)``."""
    ids = answer_ids(response_ids, response_lens)
    if not len(ids):
        return 0.0, 0.0
    counts = np.bincount(ids)
    return len(counts) / len(ids), float(counts.max()) / len(ids)


def signal_metrics(trained: Any) -> dict[str, float]:
    """The step's ``rollout/zero_variance_groups``, ``rollout/distinct_answers`` and
    ``rollout/top_answer_share`` (``trained``: the pool columns the step trained on)."""
    reward = np.asarray(trained.reward, dtype=np.float64)
    distinct, top = answer_shares(trained.response_ids, trained.response_lens)
    return {
        "rollout/zero_variance_groups": zero_variance_share(reward, trained.group_id),
        "rollout/distinct_answers": distinct,
        "rollout/top_answer_share": top,
    }


@dataclass
class LearningSignalWatch:
    """Warns (one line each, at most every ``REPEAT_AFTER`` steps per kind) when a run
    has nothing to learn from or its policy collapsed to one answer."""

    decode: Callable[[Sequence[int]], str] | None = None  # token ids -> text, for the line
    streak: list[int] = field(default_factory=list)  # steps in a row without signal
    last_warned: dict[str, int] = field(default_factory=dict)

    def observe(self, step: int, trained: Any, row: dict[str, Any]) -> list[str]:
        """The warning lines for this step (the caller shows and logs them:
        ``ProgressDisplay.warn``); ``row``: its metrics row, with
        ``signal_metrics(trained)`` in it."""
        return [
            line
            for line in (self._no_signal(step, row), self._collapse(step, trained, row))
            if line
        ]

    def _due(self, kind: str, step: int) -> bool:
        last = self.last_warned.get(kind)
        if last is not None and step - last < REPEAT_AFTER:
            return False
        self.last_warned[kind] = step
        return True

    def _no_signal(self, step: int, row: dict[str, Any]) -> str | None:
        share = float(row.get("rollout/zero_variance_groups", 0.0))
        reward = float(row.get("reward/mean", 0.0))
        if share < NO_SIGNAL_SHARE or reward >= SOLVED_REWARD:
            self.streak = []
            return None
        self.streak.append(step)
        if len(self.streak) < NO_SIGNAL_STEPS or not self._due("no_signal", step):
            return None
        return (
            f"steps {self.streak[0]}-{step}: {share:.0%} of the groups gave every sample the "
            f"same reward (step mean {reward:.3f}): their GRPO advantage is 0, nothing to "
            f"learn from (rollout/zero_variance_groups); {GUIDE}"
        )

    def _collapse(self, step: int, trained: Any, row: dict[str, Any]) -> str | None:
        if float(row.get("rollout/top_answer_share", 0.0)) < COLLAPSE_SHARE:
            return None  # the row's share (signal_metrics): no second pass over the answers
        groups = len(np.unique(np.asarray(trained.group_id)))
        ids = answer_ids(trained.response_ids, trained.response_lens)
        if groups < MIN_GROUPS or not len(ids):
            return None
        counts = np.bincount(ids)
        top = int(counts.argmax())
        share = counts[top] / len(ids)
        reward = float(np.asarray(trained.reward, dtype=np.float64)[ids == top].mean())
        if share < COLLAPSE_SHARE or reward >= SOLVED_REWARD or not self._due("collapse", step):
            return None
        return (
            f"step {step}: {share:.0%} of the samples over {groups} groups gave the same "
            f"answer{self._text(trained, ids, top)} (mean reward {reward:.3f}): the policy "
            f"collapsed to one answer (rollout/top_answer_share); {GUIDE}"
        )

    def _text(self, trained: Any, ids: np.ndarray, top: int) -> str:
        if self.decode is None:
            return ""
        i = int(np.flatnonzero(ids == top)[0])
        lens = np.asarray(trained.response_lens, dtype=np.int64)
        start = int(lens[:i].sum())
        try:
            text = self.decode([int(t) for t in trained.response_ids[start : start + lens[i]]])
        except Exception:  # a decode failure must not stop training; the line goes without
            return ""
        return f" {text[:60]!r}"
