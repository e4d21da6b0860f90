"""Dynamic-sampling filter: drop zero-variance groups."""

from __future__ import annotations

import pytest
import torch

from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, zero_variance_group_mask


def test_drops_groups_with_equal_rewards() -> None:
    # group 0: [1, 1] equal -> drop; group 1: [0, 1, 1] -> keep; group 2: singleton -> drop;
    # group 5: [3, 3, 3] -> drop. 3 of 4 groups dropped, 6 of 9 trajectories dropped.
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0])
    groups = torch.tensor([0, 0, 1, 1, 1, 2, 5, 5, 5])
    keep, metrics = zero_variance_group_mask(rewards, groups)
    assert keep.tolist() == [False, False, True, True, True, False, False, False, False]
    assert metrics["dropped_group_frac"] == pytest.approx(0.75)
    assert metrics["dropped_traj_frac"] == pytest.approx(6 / 9)
    assert metrics["num_groups"] == 4.0
    assert metrics["num_kept_groups"] == 1.0


def test_interleaved_unsorted_group_ids() -> None:
    # group 9: [0.5, 0.5] (rows 0, 3) dropped; group -1: [0, 2] (rows 1, 2) kept
    keep, metrics = zero_variance_group_mask(
        torch.tensor([0.5, 0.0, 2.0, 0.5]), torch.tensor([9, -1, -1, 9])
    )
    assert keep.tolist() == [False, True, True, False]
    assert metrics["dropped_group_frac"] == 0.5
    assert metrics["dropped_traj_frac"] == 0.5


def test_tolerance() -> None:
    rewards = torch.tensor([1.0, 1.05])
    groups = torch.tensor([0, 0])
    assert zero_variance_group_mask(rewards, groups)[0].tolist() == [True, True]
    assert zero_variance_group_mask(rewards, groups, atol=0.1)[0].tolist() == [False, False]
    assert zero_variance_group_mask(rewards, groups, atol=0.01)[0].tolist() == [True, True]
    with pytest.raises(ValueError, match="atol"):
        zero_variance_group_mask(rewards, groups, atol=-1.0)


def test_extreme_and_integer_rewards() -> None:
    keep, _ = zero_variance_group_mask(
        torch.tensor([3.0e38, -3.0e38, 7, 7]), torch.tensor([0, 0, 1, 1])
    )
    assert keep.tolist() == [True, True, False, False]
    keep, _ = zero_variance_group_mask(torch.tensor([1, 0, 4, 4]), torch.tensor([0, 0, 1, 1]))
    assert keep.tolist() == [True, True, False, False]


def test_empty_batch_and_shape_checks() -> None:
    keep, metrics = zero_variance_group_mask(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert keep.shape == (0,) and keep.dtype == torch.bool
    assert metrics["dropped_group_frac"] == 0.0 and metrics["dropped_traj_frac"] == 0.0
    with pytest.raises(ValueError, match=r"rewards must be \[B\]"):
        zero_variance_group_mask(torch.zeros(2, 3), torch.zeros(2))
    with pytest.raises(ValueError, match="group_ids shape"):
        zero_variance_group_mask(torch.zeros(2), torch.zeros(3))


def test_kept_rows_are_exactly_the_rows_with_nonzero_grpo_advantage() -> None:
    gen = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 2, (64,), generator=gen).float()
    groups = torch.arange(64) // 4
    keep, _ = zero_variance_group_mask(scores, groups)
    adv, _ = ADVANTAGE_ESTIMATORS.get("grpo")(scores.unsqueeze(-1), torch.ones(64, 1), groups)
    assert torch.equal(keep, adv[:, 0] != 0)
    assert 0 < keep.sum() < 64  # the seed gives both kinds of group
