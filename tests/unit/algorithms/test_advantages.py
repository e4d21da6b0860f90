"""Advantage estimators against hand-computed fixtures (expected numbers in comments)."""

from __future__ import annotations

import math

import pytest
import torch

from nexrl.trainer.algorithms import (
    ADVANTAGE_ESTIMATORS,
    group_ids_from_keys,
    token_level_from_scalar,
)
from nexrl.trainer.algorithms.advantages import (
    grpo,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    rloo,
)
from nexrl.trainer.algorithms.value import estimator_takes_values

SQRT_HALF = math.sqrt(0.5)  # 0.70710678


def outcome(scores: list[float], length: int = 3, dtype: torch.dtype = torch.float64):
    """Token rewards with each score on the last of ``length`` tokens; full mask."""
    rewards = torch.zeros(len(scores), length, dtype=dtype)
    rewards[:, -1] = torch.tensor(scores, dtype=dtype)
    return rewards, torch.ones(len(scores), length)


def per_seq(adv: torch.Tensor) -> torch.Tensor:
    """Advantages of fully-valid rows are constant over tokens: take column 0."""
    assert torch.equal(adv, adv[:, :1].expand_as(adv))
    return adv[:, 0]


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values)


# ------------------------------------------------------------------ reward placement


def test_token_level_from_scalar_uses_last_valid_token() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    out = token_level_from_scalar(torch.tensor([2.0, -1.0, 3.0, 0.5]), mask)
    expected = torch.tensor(
        [
            [0.0, 2.0, 0.0, 0.0],  # last valid = 1
            [0.0, 0.0, -1.0, 0.0],  # holes: last valid = 2
            [3.0, 0.0, 0.0, 0.0],  # no valid token: column 0 keeps the score
            [0.0, 0.0, 0.0, 0.5],
        ]
    )
    assert torch.equal(out, expected)
    assert torch.equal(out.sum(-1), torch.tensor([2.0, -1.0, 3.0, 0.5]))


def test_token_level_from_scalar_int_rewards_and_bad_shapes() -> None:
    out = token_level_from_scalar(torch.tensor([1, 2]), torch.ones(2, 2, dtype=torch.bool))
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.tensor([[0.0, 1.0], [0.0, 2.0]]))
    with pytest.raises(ValueError, match="rewards must be"):
        token_level_from_scalar(torch.zeros(3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="T == 0"):
        token_level_from_scalar(torch.zeros(2), torch.ones(2, 0))


def test_group_ids_from_keys_first_appearance_order() -> None:
    assert torch.equal(group_ids_from_keys(["b", "a", "b", "c", "a"]), ids(0, 1, 0, 2, 1))


# ------------------------------------------------------------------------------ GRPO


def test_grpo_two_groups_unbiased_std() -> None:
    # group 0: r = [1, 2, 3]  mean 2, std (ddof 1) = sqrt((1 + 0 + 1) / 2) = 1
    #   -> A = [-1, 0, 1]
    # group 1: r = [0, 4]     mean 2, std (ddof 1) = sqrt((4 + 4) / 1) = 2*sqrt(2)
    #   -> A = [-2, 2] / 2.828427 = [-0.707107, 0.707107]
    rewards, mask = outcome([1, 2, 3, 0, 4])
    adv, ret = grpo(rewards, mask, ids(0, 0, 0, 1, 1), eps=0.0)
    expected = torch.tensor([-1.0, 0.0, 1.0, -SQRT_HALF, SQRT_HALF], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)
    assert torch.equal(adv, ret)
    assert adv.dtype == torch.float64


def test_grpo_default_eps() -> None:
    # r = [1, 2, 3]: std 1 -> A = [-1, 0, 1] / (1 + 1e-6)
    rewards, mask = outcome([1, 2, 3])
    adv, _ = grpo(rewards, mask, ids(0, 0, 0))
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64) / (1 + 1e-6)
    )


def test_grpo_population_std() -> None:
    # group 0: std (ddof 0) = sqrt(2/3) = 0.816497 -> A = [-1.224745, 0, 1.224745]
    # group 1: std (ddof 0) = sqrt((4 + 4) / 2) = 2 -> A = [-1, 1]
    rewards, mask = outcome([1, 2, 3, 0, 4])
    adv, _ = grpo(rewards, mask, ids(0, 0, 0, 1, 1), eps=0.0, std_ddof=0)
    expected = torch.tensor([-1.2247449, 0.0, 1.2247449, -1.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)


def test_dr_grpo_no_std_normalisation() -> None:
    # A = r - mean: group 0 -> [-1, 0, 1]; group 1 -> [-2, 2]
    rewards, mask = outcome([1, 2, 3, 0, 4])
    adv, _ = grpo(rewards, mask, ids(0, 0, 0, 1, 1), norm_adv_by_std=False)
    expected = torch.tensor([-1.0, 0.0, 1.0, -2.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)


def test_grpo_broadcasts_over_tokens_and_masks() -> None:
    # scores [1, 0] in one group: A = [+0.707107, -0.707107]
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv, _ = grpo(rewards, mask, ids(3, 3), eps=0.0)
    expected = torch.tensor([[SQRT_HALF, SQRT_HALF, 0.0], [-SQRT_HALF, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected)
    assert adv.dtype == torch.float32


def test_grpo_singleton_group_is_zero_not_nan() -> None:
    # group 9 has one member -> 0 (verl/NexRL would give r / (1 + eps) or NaN)
    rewards, mask = outcome([1, 0, 5])
    for kwargs in ({}, {"norm_adv_by_std": False}, {"std_ddof": 0}):
        adv, _ = grpo(rewards, mask, ids(1, 1, 9), eps=0.0, **kwargs)
        assert torch.isfinite(adv).all()
        assert per_seq(adv)[2] == 0.0
        assert per_seq(adv)[0] > 0 > per_seq(adv)[1]


def test_grpo_zero_variance_group_is_exactly_zero() -> None:
    # 0.1 * 3 / 3 != 0.1 in float: (r - mean) / eps would be ~1e-11; must be exactly 0
    rewards, mask = outcome([0.1, 0.1, 0.1, 5, 5])
    for kwargs in ({}, {"norm_adv_by_std": False}, {"std_ddof": 0}):
        adv, _ = grpo(rewards, mask, ids(0, 0, 0, 1, 1), **kwargs)
        assert torch.equal(adv, torch.zeros_like(adv))


def test_grpo_two_stage_mean_over_runs() -> None:
    # one group; runs: a -> [1, 1, 1] (mean 1), b -> [0] (mean 0)
    # two-stage mean = (1 + 0) / 2 = 0.5; std of run means (ddof 1) = sqrt(0.5) = 0.707107
    # A = (1 - 0.5) / 0.707107 = 0.707107 for run a, -0.707107 for run b
    # (plain GRPO would use mean 0.75, std 0.5 -> [0.5, 0.5, 0.5, -1.5])
    rewards, mask = outcome([1, 1, 1, 0])
    adv, _ = grpo(rewards, mask, ids(0, 0, 0, 0), ids(10, 10, 10, 11), eps=0.0)
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([SQRT_HALF] * 3 + [-SQRT_HALF], dtype=torch.float64)
    )
    plain, _ = grpo(rewards, mask, ids(0, 0, 0, 0), eps=0.0)
    torch.testing.assert_close(
        per_seq(plain), torch.tensor([0.5, 0.5, 0.5, -1.5], dtype=torch.float64)
    )


def test_grpo_two_stage_trajectory_keeps_its_own_score() -> None:
    # runs: a -> [1, 0] (mean 0.5), b -> [1] (mean 1), c -> [0] (mean 0)
    # group mean = 0.5; run-mean deviations [0, 0.5, -0.5] -> std (ddof 1) = sqrt(0.5/2) = 0.5
    # A_i = (r_i - 0.5) / 0.5 = [1, -1, 1, -1]
    rewards, mask = outcome([1, 0, 1, 0])
    adv, _ = grpo(rewards, mask, ids(4, 4, 4, 4), ids(1, 1, 2, 3), eps=0.0)
    torch.testing.assert_close(
        per_seq(adv), torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    )


def test_grpo_all_members_share_one_run_is_zero() -> None:
    # NexRL: torch.std over a single run mean -> NaN. Here: fewer than 2 runs -> 0.
    rewards, mask = outcome([1, 0, 1, 3, 2])
    for kwargs in ({}, {"std_ddof": 0}, {"norm_adv_by_std": False}):
        adv, _ = grpo(rewards, mask, ids(0, 0, 0, 1, 1), ids(7, 7, 7, 8, 9), **kwargs)
        assert torch.isfinite(adv).all()
        assert torch.equal(per_seq(adv)[:3], torch.zeros(3, dtype=torch.float64))
        assert per_seq(adv)[3] > 0 > per_seq(adv)[4]


def test_grpo_runs_with_equal_means_carry_no_signal() -> None:
    # runs a -> [0, 1] (mean 0.5), b -> [0.5]: run means equal -> std 0 -> A = 0, not +-0.5/eps
    rewards, mask = outcome([0, 1, 0.5])
    adv, _ = grpo(rewards, mask, ids(0, 0, 0), ids(1, 1, 2))
    assert torch.equal(adv, torch.zeros_like(adv))


def test_grpo_run_ids_are_scoped_per_group() -> None:
    # run id 0 appears in both groups; it must not merge them.
    # group 0: runs 0 -> [1], 1 -> [0]  => A = [+0.707107, -0.707107]
    # group 1: runs 0 -> [2], 1 -> [4]  => A = [-0.707107, +0.707107]
    rewards, mask = outcome([1, 0, 2, 4])
    adv, _ = grpo(rewards, mask, ids(0, 0, 1, 1), ids(0, 1, 0, 1), eps=0.0)
    expected = torch.tensor([SQRT_HALF, -SQRT_HALF, -SQRT_HALF, SQRT_HALF], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)


def test_grpo_unsorted_sparse_negative_group_ids() -> None:
    # same data as test_grpo_two_groups_unbiased_std with the rows interleaved
    rewards, mask = outcome([0, 1, 4, 2, 3])
    adv, _ = grpo(rewards, mask, ids(-5, 1000, -5, 1000, 1000), eps=0.0)
    expected = torch.tensor([-SQRT_HALF, -1.0, SQRT_HALF, 0.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)


def test_grpo_fully_masked_row_still_counts_in_group() -> None:
    # rewards [1, 0] placed by token_level_from_scalar; row 1 has no valid token
    mask = torch.tensor([[1, 1], [0, 0]])
    rewards = token_level_from_scalar(torch.tensor([1.0, 0.0]), mask)
    adv, _ = grpo(rewards, mask, ids(0, 0), eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([[SQRT_HALF, SQRT_HALF], [0.0, 0.0]]))


def test_grpo_extreme_values_stay_finite() -> None:
    # float32 extremes: squares overflow float32 but stats run in float64
    big = 3.0e38
    rewards, mask = outcome([big, -big], dtype=torch.float32)
    adv, _ = grpo(rewards, mask, ids(0, 0), eps=0.0)
    torch.testing.assert_close(per_seq(adv), torch.tensor([SQRT_HALF, -SQRT_HALF]))
    # Dr.GRPO: r - mean = -4.5e38 does not fit float32 -> clamped to the finite range
    rewards, mask = outcome([big, big, -big], dtype=torch.float32)
    adv, _ = grpo(rewards, mask, ids(0, 0, 0), norm_adv_by_std=False)
    assert torch.isfinite(adv).all()
    assert per_seq(adv)[2] == torch.finfo(torch.float32).min
    # tiny but distinct scores are signal, not round-off: A = +-0.707107
    rewards, mask = outcome([1e-30, 2e-30], dtype=torch.float32)
    adv, _ = grpo(rewards, mask, ids(0, 0), eps=0.0)
    torch.testing.assert_close(per_seq(adv), torch.tensor([-SQRT_HALF, SQRT_HALF]))


def test_grpo_bfloat16_and_int_rewards() -> None:
    rewards, mask = outcome([1, 2, 3], dtype=torch.bfloat16)
    adv, _ = grpo(rewards, mask, ids(0, 0, 0), eps=0.0)
    assert adv.dtype == torch.bfloat16
    assert per_seq(adv).tolist() == [-1.0, 0.0, 1.0]
    adv, _ = grpo(torch.tensor([[1], [3]]), torch.ones(2, 1), ids(0, 0), eps=0.0)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv[:, 0], torch.tensor([-SQRT_HALF, SQRT_HALF]))


def test_grpo_options_and_shapes_are_validated() -> None:
    rewards, mask = outcome([1, 2])
    with pytest.raises(ValueError, match="std_ddof"):
        grpo(rewards, mask, ids(0, 0), std_ddof=2)
    with pytest.raises(ValueError, match="eps"):
        grpo(rewards, mask, ids(0, 0), eps=-1.0)
    with pytest.raises(TypeError):
        grpo(rewards, mask, ids(0, 0), gamma=0.9)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="group_ids"):
        grpo(rewards, mask, ids(0, 0, 0))
    with pytest.raises(ValueError, match="run_ids"):
        grpo(rewards, mask, ids(0, 0), ids(1))
    with pytest.raises(ValueError, match="response_mask shape"):
        grpo(rewards, mask[:, :2], ids(0, 0))
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        grpo(rewards[:, 0], mask[:, 0], ids(0, 0))


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_empty_batch(name: str) -> None:
    fn = ADVANTAGE_ESTIMATORS.get(name)
    adv, ret = fn(torch.zeros(0, 4), torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert adv.shape == ret.shape == (0, 4)


def test_grpo_matches_a_per_group_loop_on_random_data() -> None:
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (600,), generator=gen).to(torch.float64) / 3
    groups = torch.randint(0, 150, (600,), generator=gen)
    rewards, mask = outcome(scores.tolist(), length=2)
    adv, _ = grpo(rewards, mask, groups)
    expected = torch.zeros(600, dtype=torch.float64)
    for g in groups.unique().tolist():
        members = (groups == g).nonzero().squeeze(-1)
        s = scores[members]
        if len(s) > 1 and s.max() > s.min():
            expected[members] = (s - s.mean()) / (s.std() + 1e-6)
    torch.testing.assert_close(per_seq(adv), expected)


# ------------------------------------------------------------------------------ RLOO


def test_rloo_leave_one_out_baseline() -> None:
    # group 0: r = [1, 2, 3]: A_1 = 1 - (2+3)/2 = -1.5, A_2 = 2 - (1+3)/2 = 0, A_3 = 3 - 1.5 = 1.5
    # group 1: r = [0, 4]:    A = [0 - 4, 4 - 0] = [-4, 4]
    # group 2: singleton      A = 0
    rewards, mask = outcome([1, 2, 3, 0, 4, 7])
    adv, ret = rloo(rewards, mask, ids(0, 0, 0, 1, 1, 2))
    expected = torch.tensor([-1.5, 0.0, 1.5, -4.0, 4.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)
    assert torch.equal(adv, ret)


def test_rloo_leaves_out_whole_runs() -> None:
    # runs a -> [1, 1, 1] (mean 1), b -> [0] (mean 0), c -> [0.5] (mean 0.5)
    # A(a) = 1 - (0 + 0.5)/2 = 0.75; A(b) = 0 - (1 + 0.5)/2 = -0.75; A(c) = 0.5 - (1 + 0)/2 = 0
    rewards, mask = outcome([1, 1, 1, 0, 0.5])
    adv, _ = rloo(rewards, mask, ids(0, 0, 0, 0, 0), ids(1, 1, 1, 2, 3))
    expected = torch.tensor([0.75, 0.75, 0.75, -0.75, 0.0], dtype=torch.float64)
    torch.testing.assert_close(per_seq(adv), expected)


def test_rloo_degenerate_groups_are_zero() -> None:
    # zero variance (0.1 x 3), one shared run id, singleton: all exactly 0
    rewards, mask = outcome([0.1, 0.1, 0.1, 1, 0, 2])
    adv, _ = rloo(rewards, mask, ids(0, 0, 0, 1, 1, 2), ids(0, 1, 2, 5, 5, 6))
    assert torch.equal(adv, torch.zeros_like(adv))


# ------------------------------------------------------------------------ REINFORCE++


def test_reinforce_plus_plus_discounted_and_whitened() -> None:
    # gamma = 0.5
    # row 0: r = [0, 0, 1], all valid     -> G = [0.25, 0.5, 1]
    # row 1: r = [0, 0, 2], mask [1, 0, 1] -> G_2 = 2, G_0 = 0 + 0.5 * 2 = 1 (masked token
    #        skipped, not discounted), G_1 = 0 (masked)
    # valid G: [0.25, 0.5, 1, 1, 2]: mean 0.95, deviations [-0.7, -0.45, 0.05, 0.05, 1.05],
    # sum of squares 1.8, unbiased var 0.45, std 0.670820
    # A = dev / 0.670820 = [-1.043498, -0.670820, 0.074536, 0.074536, 1.565248]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1]])
    adv, ret = reinforce_plus_plus(rewards, mask, ids(0, 1), gamma=0.5, eps=0.0)
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 0.0, 2.0]]))
    expected = torch.tensor([[-1.043498, -0.670820, 0.074536], [0.074536, 0.0, 1.565248]])
    torch.testing.assert_close(adv, expected)


def test_reinforce_plus_plus_gamma_one_and_zero() -> None:
    # r = [1, 2, 3]: gamma 1 -> G = [6, 5, 3]; gamma 0 -> G = r
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3)
    _, ret = reinforce_plus_plus(rewards, mask, ids(0), gamma=1.0)
    assert torch.equal(ret, torch.tensor([[6.0, 5.0, 3.0]]))
    _, ret = reinforce_plus_plus(rewards, mask, ids(0), gamma=0.0)
    assert torch.equal(ret, rewards)


def test_reinforce_plus_plus_long_sequence_crosses_chunks() -> None:
    # gamma 0.5 scans in chunks of int(600 / ln 2) = 865 tokens; T = 2000 spans three.
    # reward 1 on the last token: G_t = 0.5 ** (1999 - t); masking tokens 100..199 removes
    # 100 discount steps for every t < 100: G_t = 0.5 ** (1899 - t) there.
    length = 2000
    rewards = torch.zeros(1, length, dtype=torch.float64)
    rewards[0, -1] = 1.0
    mask = torch.ones(1, length)
    _, ret = reinforce_plus_plus(rewards, mask, ids(0), gamma=0.5)
    for t in (1999, 1500, 1135, 1134, 1000, 270, 269, 0):
        assert ret[0, t].item() == pytest.approx(math.ldexp(1.0, -(1999 - t)), rel=1e-12)
    mask[0, 100:200] = 0
    _, ret = reinforce_plus_plus(rewards, mask, ids(0), gamma=0.5)
    assert ret[0, 150].item() == 0.0
    for t in (99, 50, 0):
        assert ret[0, t].item() == pytest.approx(math.ldexp(1.0, -(1899 - t)), rel=1e-12)


def test_reinforce_plus_plus_degenerate_batches() -> None:
    # all masked -> zeros; one valid token -> 0 (no variance); equal returns -> 0
    rewards = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    for mask in (torch.zeros(2, 2), torch.tensor([[0, 1], [0, 0]])):
        adv, _ = reinforce_plus_plus(rewards, mask, ids(0, 1))
        assert torch.equal(adv, torch.zeros_like(adv))
    adv, _ = reinforce_plus_plus(
        torch.tensor([[0.0, 0.1], [0.0, 0.1]]), torch.ones(2, 2), ids(0, 1), gamma=1.0
    )
    assert torch.equal(adv, torch.zeros_like(adv))
    with pytest.raises(ValueError, match="gamma"):
        reinforce_plus_plus(rewards, torch.ones(2, 2), ids(0, 1), gamma=1.5)


def test_reinforce_plus_plus_extreme_rewards_finite() -> None:
    rewards = torch.tensor([[0.0, 3.0e38], [-3.0e38, 0.0]])
    adv, ret = reinforce_plus_plus(rewards, torch.ones(2, 2), ids(0, 1), gamma=0.99)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


def test_reinforce_plus_plus_baseline_group_centred_then_whitened() -> None:
    # group 0: r = [1, 2, 3] -> r - mean = [-1, 0, 1]; group 1 singleton [5] -> 0
    # masks: row0 [1, 1], row1 [1, 0], row2 [1, 1], row3 [1, 1]
    # valid token values: [-1, -1, 0, 1, 1, 0, 0]: mean 0, sum sq 4, unbiased var 4/6,
    # std 0.816497 -> A = [-1.224745, 0, 1.224745, 0] per row
    rewards, _ = outcome([1, 2, 3, 5], length=2)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]])
    adv, ret = reinforce_plus_plus_baseline(rewards, mask, ids(0, 0, 0, 1), eps=0.0)
    expected = torch.tensor(
        [[-1.2247449, -1.2247449], [0.0, 0.0], [1.2247449, 1.2247449], [0.0, 0.0]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(adv, expected)
    assert torch.equal(adv, ret)


def test_reinforce_plus_plus_baseline_uses_two_stage_mean() -> None:
    # runs a -> [1, 1, 1] (mean 1), b -> [0]: group mean 0.5 -> b = [0.5, 0.5, 0.5, -0.5]
    # tokens (length 1): mean 0.25, deviations [0.25 x3, -0.75], sum sq 0.75, var 0.25, std 0.5
    # A = [0.5, 0.5, 0.5, -1.5]
    rewards, mask = outcome([1, 1, 1, 0], length=1)
    adv, _ = reinforce_plus_plus_baseline(rewards, mask, ids(0, 0, 0, 0), ids(1, 1, 1, 2), eps=0.0)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, 0.5, 0.5, -1.5], dtype=torch.float64))


@pytest.mark.parametrize("name", ADVANTAGE_ESTIMATORS.names())
def test_no_nan_or_inf_for_any_estimator(name: str) -> None:
    fn = ADVANTAGE_ESTIMATORS.get(name)
    rewards = torch.tensor(
        [[0.0, 1e30], [0.0, -1e30], [5.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
    )
    mask = torch.tensor([[1, 1], [1, 1], [0, 0], [1, 0], [1, 1], [1, 1]])
    # groups: extreme pair, singleton with no valid token, singleton, zero-variance pair
    # (gae, nstep: with a critic's values as well)
    values = {"values": torch.full((6, 2), 0.5)} if estimator_takes_values(fn) else {}
    adv, ret = fn(rewards, mask, ids(0, 0, 1, 2, 3, 3), ids(0, 1, 0, 0, 0, 1), **values)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.equal(adv[2], torch.zeros(2))  # fully masked row
    assert adv[3, 1] == 0.0  # masked token
