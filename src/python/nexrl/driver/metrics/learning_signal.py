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
* ``rollout/prompt_dependence``: how much a group's answers depend on its prompt,
  ``1 - H_group / H_shuffled``: ``H_group`` is the mean entropy of the answers
  within each group (the samples of one prompt), ``H_shuffled`` the same with the
  batch's answers dealt to the groups at random (so the estimate's small-sample
  bias cancels). 0: each prompt's answers are spread like the whole batch's (the
  policy ignores its prompt); 1: one answer per prompt. Only in rows whose
  answers repeat (at most half of them distinct, over ``MIN_GROUPS`` groups or
  more): long free-form answers are all distinct and say nothing here.

``LearningSignalWatch`` writes one warning line when either cause holds:

* **no signal**: at least ``NO_SIGNAL_SHARE`` of the groups had no reward variance
  for ``NO_SIGNAL_STEPS`` steps in a row, while the step's mean reward is below
  ``SOLVED_REWARD`` (a solved task also gives every sample the same reward);
* **collapse**: at least ``COLLAPSE_SHARE`` of a step's samples gave the same
  response, over at least ``MIN_GROUPS`` groups, and those samples' mean reward is
  below ``SOLVED_REWARD`` (one answer that is right for every prompt is not a
  collapse).

* **at chance**: ``rollout/prompt_dependence``, averaged over the last
  ``AT_CHANCE_STEPS`` steps (each with the metric), below ``AT_CHANCE_DEPENDENCE``
  while the reward stays flat (the mean of those steps' last 5 within
  ``FLAT_REWARD`` of their first 5) and short of solved. Partial credit gives every group reward variance, so the first check
  stays quiet on such a run.

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
    "prompt_dependence",
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
AT_CHANCE_DEPENDENCE = 0.05  # chance measured 0.00-0.04 (4-16 groups of 8, 10 answers)
AT_CHANCE_STEPS = 50  # 30 warned on a learning run (the default task, 60-step schedule)
FLAT_REWARD = 0.05
SHUFFLES = 4  # random deals of the answers averaged for H_shuffled (seeded: repeatable)


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
    return _shares(answer_ids(response_ids, response_lens))


def _shares(ids: np.ndarray) -> tuple[float, float]:
    if not len(ids):
        return 0.0, 0.0
    counts = np.bincount(ids)
    return len(counts) / len(ids), float(counts.max()) / len(ids)


def _group_entropy(group: np.ndarray, answer: np.ndarray, n_groups: int) -> float:
    """Mean over groups of the plug-in entropy (nats) of each group's answers."""
    pairs, counts = np.unique(np.stack([group, answer]), axis=1, return_counts=True)
    sizes = np.bincount(group, minlength=n_groups).astype(np.float64)
    p = counts / sizes[pairs[0]]
    h = np.zeros(n_groups)
    np.add.at(h, pairs[0], -p * np.log(p))
    return float(h.mean())


def prompt_dependence(answers: np.ndarray, group_id: np.ndarray) -> float | None:
    """``1 - H_group / H_shuffled`` (see the module's docstring), in [0, 1]; None where
    it says nothing: fewer than ``MIN_GROUPS`` groups, a group of one sample, more
    than half the answers distinct, or a single answer (that is a collapse)."""
    answers = np.asarray(answers, dtype=np.int64)
    if not len(answers):
        return None
    _, group = np.unique(np.asarray(group_id), return_inverse=True)
    group = group.reshape(-1)
    n_groups = int(group.max()) + 1
    if n_groups < MIN_GROUPS or np.bincount(group).min() < 2:
        return None
    distinct = len(np.unique(answers))
    if distinct < 2 or distinct > len(answers) / 2:
        return None
    rng = np.random.default_rng(0)
    shuffled = np.mean(
        [_group_entropy(group, rng.permutation(answers), n_groups) for _ in range(SHUFFLES)]
    )
    if shuffled <= 0:
        return None
    return float(np.clip(1.0 - _group_entropy(group, answers, n_groups) / shuffled, 0.0, 1.0))


def signal_metrics(trained: Any) -> dict[str, float]:
    """The step's ``rollout/zero_variance_groups``, ``rollout/distinct_answers``,
    ``rollout/top_answer_share`` and, where it says something,
    ``rollout/prompt_dependence`` (``trained``: the pool columns the step trained on)."""
    reward = np.asarray(trained.reward, dtype=np.float64)
    ids = answer_ids(trained.response_ids, trained.response_lens)  # once, for both
    distinct, top = _shares(ids)
    row = {
        "rollout/zero_variance_groups": zero_variance_share(reward, trained.group_id),
        "rollout/distinct_answers": distinct,
        "rollout/top_answer_share": top,
    }
    dependence = prompt_dependence(ids, trained.group_id)
    if dependence is not None:
        row["rollout/prompt_dependence"] = dependence
    return row


@dataclass
class LearningSignalWatch:
    """Warns (one line each, at most every ``REPEAT_AFTER`` steps per kind) when a run
    has nothing to learn from or its policy collapsed to one answer."""

    decode: Callable[[Sequence[int]], str] | None = None  # token ids -> text, for the line
    streak: list[int] = field(default_factory=list)  # steps in a row without signal
    chance: list[tuple[int, float, float]] = field(default_factory=list)  # (step, reward, dep.)
    last_warned: dict[str, int] = field(default_factory=dict)

    def observe(self, step: int, trained: Any, row: dict[str, Any]) -> list[str]:
        """The warning lines for this step (the caller shows and logs them:
        ``ProgressDisplay.warn``); ``row``: its metrics row, with
        ``signal_metrics(trained)`` in it."""
        lines = (
            self._no_signal(step, row),
            self._collapse(step, trained, row),
            self._at_chance(step, row),
        )
        return [line for line in lines if line]

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

    def _at_chance(self, step: int, row: dict[str, Any]) -> str | None:
        dependence = row.get("rollout/prompt_dependence")
        reward = float(row.get("reward/mean", 0.0))
        if dependence is None or reward >= SOLVED_REWARD:
            self.chance = []
            return None
        self.chance = [*self.chance, (step, reward, float(dependence))][-AT_CHANCE_STEPS:]
        if len(self.chance) < AT_CHANCE_STEPS:
            return None
        steps, rewards, dependences = zip(*self.chance, strict=True)
        mean_dependence = float(np.mean(dependences))
        first, last = float(np.mean(rewards[:5])), float(np.mean(rewards[-5:]))
        if (
            mean_dependence >= AT_CHANCE_DEPENDENCE
            or abs(last - first) > FLAT_REWARD
            or not self._due("at_chance", step)
        ):
            return None
        return (
            f"steps {steps[0]}-{step}: each prompt's answers are spread like the whole "
            f"batch's (rollout/prompt_dependence {mean_dependence:.2f} on average) and the "
            f"reward stays at {last:.3f}: the policy answers at chance, ignoring its "
            f"prompt; {GUIDE}"
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
