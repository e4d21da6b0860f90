"""GRPO advantages: vectorised estimator vs a straightforward per-group Python loop.

100k trajectories in groups of 8, response length 16. Both variants run in the
same session under the ``grpo-advantages`` benchmark group; each also checks
that it returns the same advantages as the other.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import torch

from nexrl.trainer.algorithms.advantages import grpo

NUM_TRAJ = 100_000
GROUP_SIZE = 8
LENGTH = 16
EPS = 1e-6


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    lengths = torch.randint(1, LENGTH + 1, (NUM_TRAJ,), generator=gen)
    mask = (torch.arange(LENGTH) < lengths.unsqueeze(-1)).float()
    # rewards in {0, 0.5, 1}: many groups mix, some are all-equal (zero variance)
    scores = torch.randint(0, 3, (NUM_TRAJ,), generator=gen).float() / 2
    rewards = torch.zeros(NUM_TRAJ, LENGTH)
    rewards[torch.arange(NUM_TRAJ), lengths - 1] = scores
    # shuffled group ids: members of a group are not adjacent
    group_ids = torch.arange(NUM_TRAJ)[torch.randperm(NUM_TRAJ, generator=gen)] // GROUP_SIZE
    return rewards, mask, group_ids


def grpo_python_loop(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: torch.Tensor
) -> torch.Tensor:
    """Reference: bucket trajectories per group in a dict, normalise group by group."""
    scores = token_level_rewards.sum(-1).double()
    members: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids.tolist()):
        members[g].append(i)
    adv = torch.zeros_like(scores)
    for rows in members.values():
        index = torch.tensor(rows)
        s = scores[index]
        if len(rows) > 1 and s.max() > s.min():
            adv[index] = (s - s.mean()) / (s.std() + EPS)
    return adv.float().unsqueeze(-1) * response_mask


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _batch()


@pytest.fixture(scope="module")
def expected(batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> dict[str, Any]:
    return {"loop": grpo_python_loop(*batch), "vectorised": grpo(*batch, eps=EPS)[0]}


@pytest.mark.benchmark(group="grpo-advantages")
def test_grpo_vectorised(benchmark: Any, batch: Any, expected: dict[str, Any]) -> None:
    adv, _ = benchmark.pedantic(grpo, args=batch, kwargs={"eps": EPS}, rounds=10, warmup_rounds=1)
    assert adv.shape == (NUM_TRAJ, LENGTH)
    torch.testing.assert_close(adv, expected["loop"], rtol=1e-5, atol=1e-6)
    assert (adv != 0).any() and (adv == 0).any()


@pytest.mark.benchmark(group="grpo-advantages")
def test_grpo_python_loop(benchmark: Any, batch: Any, expected: dict[str, Any]) -> None:
    adv = benchmark.pedantic(grpo_python_loop, args=batch, rounds=3, warmup_rounds=0)
    torch.testing.assert_close(adv, expected["vectorised"], rtol=1e-5, atol=1e-6)
