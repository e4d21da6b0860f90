"""The learning-signal numbers and warnings on pool columns (the controller's path:
``step_row``'s columns), against hand-counted batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nexrl.core.pool.columns import TrajectoryColumns
from nexrl.core.types.trajectory import Trajectory
from nexrl.driver.metrics import format_summary, summarize
from nexrl.driver.metrics import learning_signal as ls
from nexrl.driver.metrics.learning_signal import LearningSignalWatch, answer_ids, signal_metrics


def batch(groups: list[list[tuple[list[int], float]]]) -> TrajectoryColumns:
    """Pool columns of ``groups``: each a list of (response ids, reward)."""
    trajs = [
        Trajectory([1, 2], resp, [1] * len(resp), [0.0] * len(resp), reward, group_id=g, run_id=r)
        for g, group in enumerate(groups)
        for r, (resp, reward) in enumerate(group)
    ]
    return TrajectoryColumns.from_trajectories(trajs)


def test_metrics_counted_by_hand() -> None:
    cols = batch(
        [
            [([5], 0.0), ([5], 0.0)],  # all 0: no variance
            [([5], 1.0), ([6, 7], 0.0)],  # informative
            [([6, 7], 1.0), ([6, 7], 1.0)],  # all 1: no variance
            [([6], 0.5), ([6, 7, 8], 0.5)],  # equal rewards, different answers
        ]
    )
    m = signal_metrics(cols)
    assert m["rollout/zero_variance_groups"] == pytest.approx(3 / 4)
    # answers: [5] x3, [6,7] x3, [6], [6,7,8]: 4 distinct of 8; the top one 3 of 8
    assert m["rollout/distinct_answers"] == pytest.approx(4 / 8)
    assert m["rollout/top_answer_share"] == pytest.approx(3 / 8)


def test_answers_differ_by_any_token_or_length() -> None:
    cols = batch([[([1], 0.0), ([1, 0], 0.0), ([0, 1], 0.0), ([1], 0.0), ([1, 0, 0], 0.0)]])
    ids = answer_ids(cols.response_ids, cols.response_lens)
    assert ids[0] == ids[3]
    assert len(set(ids.tolist())) == 4  # [1], [1, 0], [0, 1], [1, 0, 0]


def no_signal(step: int, share: float, reward: float) -> dict[str, float]:
    return {"rollout/zero_variance_groups": share, "reward/mean": reward}


def test_no_signal_warns_after_five_steps_in_a_row_then_waits() -> None:
    cols = batch([[([g], 0.0), ([g + 1], 0.0)] for g in range(8)])  # varied, not collapsed
    watch = LearningSignalWatch()
    said = {s: watch.observe(s, cols, no_signal(s, 0.95, 0.0)) for s in range(1, 6)}
    assert [s for s, lines in said.items() if lines] == [5]
    assert said[5][0].startswith("steps 1-5: 95% of the groups gave every sample the same reward")
    assert "docs/user-guide.md" in said[5][0]
    # the same streak goes on: said again only REPEAT_AFTER steps later
    later = [s for s in range(6, 60) if watch.observe(s, cols, no_signal(s, 0.95, 0.0))]
    assert later == [5 + ls.REPEAT_AFTER]


def test_no_signal_streak_breaks_and_solved_runs_stay_quiet() -> None:
    cols = batch([[([g], 1.0), ([g + 1], 1.0)] for g in range(8)])
    watch = LearningSignalWatch()
    shares = [0.95, 0.95, 0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 0.95]  # a step with signal
    assert not any(watch.observe(s, cols, no_signal(s, x, 0.2)) for s, x in enumerate(shares))
    # every group all right: the same reward everywhere, but nothing is wrong
    assert not any(watch.observe(s, cols, no_signal(s, 1.0, 1.0)) for s in range(20, 40))


def test_collapse_names_the_answer_and_its_reward() -> None:
    groups = [[([7], 0.0)] * 5 + [([g], 1.0)] for g in range(4)]  # 20 of 24 say "7"
    watch = LearningSignalWatch(decode=lambda ids: "".join(map(str, ids)))
    cols = batch(groups)
    lines = watch.observe(3, cols, signal_metrics(cols))
    assert lines == [
        "step 3: 83% of the samples over 4 groups gave the same answer '7' (mean reward "
        "0.000): the policy collapsed to one answer (rollout/top_answer_share); "
        'see "When it does not learn" in docs/user-guide.md'
    ]


@pytest.mark.parametrize(
    ("groups", "why"),
    [
        ([[([7], 1.0)] * 6 for _ in range(4)], "one answer, right everywhere"),
        ([[([7], 0.0)] * 6 for _ in range(3)], "too few groups to call it a collapse"),
        ([[([7], 0.0)] * 3 + [([g], 0.0)] * 3 for g in range(4)], "only half the samples"),
    ],
)
def test_no_collapse_warning(groups: list, why: str) -> None:
    cols = batch(groups)
    assert LearningSignalWatch().observe(1, cols, signal_metrics(cols)) == [], why


def test_summary_line_points_to_the_guide_only_when_stuck() -> None:
    def rows(share: float, top: float, reward: float) -> list[dict[str, float]]:
        return [
            {
                "step": s,
                "reward/mean": reward,
                "rollout/zero_variance_groups": share,
                "rollout/top_answer_share": top,
            }
            for s in range(1, 11)
        ]

    stuck = format_summary(summarize(rows(0.97, 0.1, 0.0)))
    assert (
        "learning signal: groups with no reward variance 97% -> 97%, most common answer "
        '10% -> 10% of the samples (see "When it does not learn" in docs/user-guide.md)'
    ) in stuck
    learning = format_summary(summarize(rows(0.4, 0.1, 0.6)))
    assert "learning signal: groups with no reward variance 40% -> 40%" in learning
    assert "When it does not learn" not in learning
    solved = summarize(rows(1.0, 0.2, 1.0))
    assert solved["zero_variance_last5"] == 1.0
    assert "When it does not learn" not in format_summary(solved)


def test_an_empty_batch_has_no_answers() -> None:
    assert ls.answer_shares(np.zeros(0, np.int32), np.zeros(0, np.int64)) == (0.0, 0.0)
    assert ls.zero_variance_share(np.zeros(0), np.zeros(0, np.int64)) == 0.0


def test_prompt_dependence_counted_by_hand() -> None:
    """4 groups of 4 over the answers 1-4. One answer per prompt: each group's entropy
    is 0, so 1 - 0 / H_shuffled = 1. Every group holding each answer once: its entropy
    is ln 4, the most a deal of these 16 answers can give, so H_shuffled <= ln 4 and
    the dependence is 0 (clipped)."""
    groups = np.repeat(np.arange(4), 4)
    assert ls.prompt_dependence(np.repeat([1, 2, 3, 4], 4), groups) == 1.0
    assert ls.prompt_dependence(np.tile([1, 2, 3, 4], 4), groups) == 0.0
    # 6 of 8 on the group's own answer, 2 on others: H_group = 0.736 nats, a random deal
    # of the same 32 answers ~1.2: in between
    own = np.repeat([1, 2, 3, 4], 6).reshape(4, 6)
    others = np.array([[2, 3], [3, 4], [4, 1], [1, 2]])
    mixed = np.concatenate([own, others], axis=1).reshape(-1)
    value = ls.prompt_dependence(mixed, np.repeat(np.arange(4), 8))
    assert value is not None and 0.2 < value < 0.8, value


@pytest.mark.parametrize(
    ("answers", "groups", "why"),
    [
        (np.arange(16), np.repeat(np.arange(4), 4), "every answer distinct: free text"),
        (np.zeros(16, np.int64), np.repeat(np.arange(4), 4), "one answer: a collapse"),
        (np.tile([1, 2], 6), np.repeat(np.arange(3), 4), "3 groups: too few"),
        (np.tile([1, 2, 3, 1, 2], 1), np.arange(5), "groups of one sample"),
    ],
)
def test_prompt_dependence_says_nothing_where_it_cannot(
    answers: np.ndarray, groups: np.ndarray, why: str
) -> None:
    assert ls.prompt_dependence(answers, groups) is None, why


def test_signal_metrics_carry_prompt_dependence_only_where_it_says_something() -> None:
    reads = batch([[([d], 1.0)] * 4 for d in (3, 4, 5, 6)])  # one answer per prompt
    assert signal_metrics(reads)["rollout/prompt_dependence"] == 1.0
    free = batch([[([g, r], 0.0) for r in range(4)] for g in range(4)])  # all distinct
    assert "rollout/prompt_dependence" not in signal_metrics(free)


def at_chance(step: int, reward: float, dependence: float | None) -> dict[str, float]:
    row = {"reward/mean": reward, "rollout/zero_variance_groups": 0.0}
    if dependence is not None:
        row["rollout/prompt_dependence"] = dependence
    return row


def test_at_chance_warns_after_fifty_flat_steps_with_partial_credit() -> None:
    """The case the zero-variance check misses: partial credit gives every group reward
    variance, the answers ignore the prompt and the reward stays flat."""
    watch = LearningSignalWatch()
    cols = batch([[([1], 0.0), ([2], 1.0)]] * 4)
    said = [watch.observe(s, cols, at_chance(s, 0.26, 0.01)) for s in range(1, 81)]
    assert [s for s, lines in enumerate(said, 1) if lines] == [50]  # then REPEAT_AFTER
    assert said[49] == [
        "steps 1-50: each prompt's answers are spread like the whole batch's "
        "(rollout/prompt_dependence 0.01 on average) and the reward stays at 0.260: "
        "the policy answers at chance, ignoring its prompt; " + ls.GUIDE
    ]


@pytest.mark.parametrize(
    ("reward", "dependence", "why"),
    [
        (lambda s: 0.1 + 0.002 * s, 0.01, "the reward climbs slowly: it is learning"),
        (lambda s: 0.3, 0.2, "the answers depend on the prompt"),
        (lambda s: 1.0, 0.0, "solved: one right answer spread like the batch's"),
        (lambda s: 0.3, None, "no metric: long free-form answers"),
    ],
)
def test_at_chance_stays_quiet(reward: Any, dependence: float | None, why: str) -> None:
    watch = LearningSignalWatch()
    cols = batch([[([1], 0.0), ([2], 1.0)]] * 4)
    lines = [watch.observe(s, cols, at_chance(s, reward(s), dependence)) for s in range(1, 81)]
    assert not any(lines), why


def test_summary_points_to_the_guide_for_a_policy_at_chance() -> None:
    rows = [
        {
            "step": s,
            "reward/mean": 0.26,
            "rollout/zero_variance_groups": 0.0,
            "rollout/top_answer_share": 0.12,
            "rollout/prompt_dependence": 0.02,
        }
        for s in range(1, 31)
    ]
    text = format_summary(summarize(rows))
    assert (
        "most common answer 12% -> 12% of the samples, answers' dependence on the prompt "
        '0.02 -> 0.02 (0: at chance) (see "When it does not learn" in docs/user-guide.md)'
    ) in text
    reading = [{**r, "rollout/prompt_dependence": 0.6} for r in rows]
    assert "When it does not learn" not in format_summary(summarize(reading))
