"""Policy losses and loss aggregation against hand-computed fixtures."""

from __future__ import annotations

import math

import pytest
import torch

from nexrl.trainer.algorithms import LOSS_AGG_MODES, POLICY_LOSSES, UnknownNameError, agg_loss
from nexrl.trainer.algorithms.policy_loss import gspo, importance_sampling, ppo_clip

LN = math.log


def leaf(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def t(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# ----------------------------------------------------------------------------- agg_loss


LOSS = t([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 fully masked


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 valid tokens
        ("seq-mean-token-sum", 3.5),  # ((1 + 2) + 4) / 2 non-empty rows
        ("seq-mean-token-mean", 2.75),  # ((1 + 2) / 2 + 4 / 1) / 2 non-empty rows
    ],
)
def test_agg_loss_modes(mode: str, expected: float) -> None:
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)
    # values at masked positions never leak, not even NaN / inf
    dirty = LOSS.clone()
    dirty[~MASK.bool()] = t([[math.nan, math.inf, -math.inf, math.nan, 1e300, 0.0]])[0]
    assert agg_loss(dirty, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_all_masked_is_zero(mode: str) -> None:
    out = agg_loss(LOSS, torch.zeros(3, 3), mode, norm_length=4.0)
    assert out.item() == 0.0


def test_agg_loss_unknown_mode() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'token-mean'"):
        agg_loss(LOSS, MASK, "token_mean")
    with pytest.raises(ValueError, match="mask"):
        agg_loss(LOSS, MASK[:, :2], "token-mean")


# ----------------------------------------------------------------------------- PPO clip

# five tokens, ratios rho = [1.5, 0.5, 1.1, 1.5, 0.5], advantages A = [1, 1, 1, -1, -1]
# clip 0.2 -> bounds [0.8, 1.2]; L = max(-A rho, -A clip(rho)):
#   t0: max(-1.5, -1.2) = -1.2 (clipped)   t1: max(-0.5, -0.8) = -0.5
#   t2: max(-1.1, -1.1) = -1.1              t3: max(1.5, 1.2) = 1.5
#   t4: max(0.5, 0.8) = 0.8 (clipped)
# token-mean = (-1.2 - 0.5 - 1.1 + 1.5 + 0.8) / 5 = -0.1, clip_frac = 2/5
# approx_kl = -mean(ln rho) = -(2 ln 1.5 + 2 ln 0.5 + ln 1.1) / 5 = 0.0960108
RATIOS = [1.5, 0.5, 1.1, 1.5, 0.5]
ADV = t([[1, 1, 1, -1, -1]])


def ppo_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    old = t([[-1.0, -2.0, -0.5, -3.0, -0.1]])
    new = (old + torch.tensor([[LN(r) for r in RATIOS]], dtype=torch.float64)).requires_grad_()
    return new, old


def test_ppo_clip_symmetric() -> None:
    new, old = ppo_inputs()
    loss, metrics = ppo_clip(new, old, ADV, torch.ones(1, 5))
    assert loss.item() == pytest.approx(-0.1)
    assert metrics["clip_frac"].item() == pytest.approx(0.4)
    assert metrics["clip_frac_lower"].item() == 0.0
    assert metrics["approx_kl"].item() == pytest.approx(0.0960108, abs=1e-7)
    assert metrics["ratio_mean"].item() == pytest.approx(sum(RATIOS) / 5)
    assert all(not v.requires_grad for v in metrics.values())
    loss.backward()
    # dL/dlogp = -A rho / 5 where unclipped: [0, -0.5/5, -1.1/5, 1.5/5, 0]
    assert new.grad is not None
    torch.testing.assert_close(new.grad, t([[0.0, -0.1, -0.22, 0.3, 0.0]]))


def test_ppo_clip_higher() -> None:
    # DAPO clip-higher: bounds [0.8, 1.28]: t0 -> max(-1.5, -1.28) = -1.28
    # loss = (-1.28 - 0.5 - 1.1 + 1.5 + 0.8) / 5 = -0.116
    new, old = ppo_inputs()
    loss, _ = ppo_clip(new, old, ADV, torch.ones(1, 5), clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert loss.item() == pytest.approx(-0.116)
    # low bound: with clip_ratio_low = 0.6 the lower bound is 0.4: t4 -> max(0.5, 0.4) = 0.5
    # loss = (-1.2 - 0.5 - 1.1 + 1.5 + 0.5) / 5 = -0.16
    loss, _ = ppo_clip(new, old, ADV, torch.ones(1, 5), clip_ratio_low=0.6)
    assert loss.item() == pytest.approx(-0.16)


def test_ppo_dual_clip_applies_to_negative_advantages_only() -> None:
    # rho = 5 on both tokens, A = [-1, +1], bounds [0.8, 1.2], c = 3
    # t0 (A<0): max(5, 1.2) = 5 -> dual min(5, 3) = 3        t1 (A>0): max(-5, -1.2) = -1.2
    # with dual clip: (3 - 1.2) / 2 = 0.9; without: (5 - 1.2) / 2 = 1.9
    old = t([[-2.0, -2.0]])
    new = (old + LN(5.0)).requires_grad_()
    adv = t([[-1.0, 1.0]])
    loss, metrics = ppo_clip(new, old, adv, torch.ones(1, 2), clip_ratio_c=3.0)
    assert loss.item() == pytest.approx(0.9)
    assert metrics["clip_frac_lower"].item() == pytest.approx(0.5)
    assert metrics["clip_frac"].item() == pytest.approx(0.5)  # t1 only
    loss.backward()
    assert new.grad is not None
    torch.testing.assert_close(new.grad, t([[0.0, 0.0]]))  # both branches constant
    loss, _ = ppo_clip(new, old, adv, torch.ones(1, 2))
    assert loss.item() == pytest.approx(1.9)


def test_ppo_clip_validates_options() -> None:
    new, old = ppo_inputs()
    mask = torch.ones(1, 5)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_clip(new, old, ADV, mask, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="clip_ratio_low"):
        ppo_clip(new, old, ADV, mask, clip_ratio_low=1.0)
    with pytest.raises(ValueError, match="clip_ratio_high"):
        ppo_clip(new, old, ADV, mask, clip_ratio_high=-0.1)
    with pytest.raises(ValueError, match="advantages shape"):
        ppo_clip(new, old, ADV[:, :2], mask)
    with pytest.raises(UnknownNameError):
        ppo_clip(new, old, ADV, mask, loss_agg_mode="mean")


def test_ppo_clip_seq_mean_token_mean() -> None:
    # row 0: rho = [1.5, 0.5] A = [1, 1] -> [-1.2, -0.5], mean -0.85
    # row 1: rho = [1.0, (masked)] A = [-2, .] -> [2.0], mean 2.0
    # seq-mean-token-mean = (-0.85 + 2.0) / 2 = 0.575
    old = t([[-1.0, -1.0], [-1.0, -1.0]])
    new = old + t([[LN(1.5), LN(0.5)], [0.0, 7.0]])
    adv = t([[1.0, 1.0], [-2.0, 100.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = ppo_clip(new, old, adv, mask, loss_agg_mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(0.575)
    assert metrics["clip_frac"].item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_masked_garbage_gives_finite_loss_and_grad(name: str) -> None:
    fn = POLICY_LOSSES.get(name)
    log_prob = leaf([[-1.0, -math.inf, math.nan], [-0.5, -0.7, -math.inf]])
    old = t([[-1.2, -math.inf, math.nan], [-0.4, -0.9, -math.inf]])
    adv = t([[1.0, math.nan, math.inf], [-1.0, -1.0, math.nan]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]])
    mask_old = mask.clone()
    loss, metrics = fn(log_prob, old, adv, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(v) for v in metrics.values())
    assert log_prob.grad is not None and torch.isfinite(log_prob.grad).all()
    assert (log_prob.grad[~mask.bool()] == 0).all()
    assert torch.equal(mask, mask_old)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_extreme_log_ratios_are_finite(name: str) -> None:
    fn = POLICY_LOSSES.get(name)
    log_prob = leaf([[-1e4, 0.0, -1e30], [0.0, -80.0, -3e38]])
    old = t([[0.0, -1e4, 0.0], [-3e38, 0.0, 0.0]])
    adv = t([[1e6, -1e6, 1.0], [-1.0, 1.0, 1e6]])
    loss, metrics = fn(log_prob, old, adv, torch.ones(2, 3))
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(v) for v in metrics.values())
    assert log_prob.grad is not None and torch.isfinite(log_prob.grad).all()


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_all_masked_batch_loss_is_zero(name: str) -> None:
    log_prob = leaf([[-1.0, -2.0]])
    loss, metrics = POLICY_LOSSES.get(name)(
        log_prob, t([[-1.5, -1.0]]), t([[1.0, -1.0]]), torch.zeros(1, 2)
    )
    assert loss.item() == 0.0
    assert all(v.item() == 0.0 for k, v in metrics.items() if k != "ratio_mean")


# --------------------------------------------------------------------------------- GSPO


def test_gspo_sequence_ratio_and_gradient() -> None:
    # seq 0: log-ratios [ln 2, 0] -> s = exp(ln 2 / 2) = sqrt 2 = 1.414214, A = +1
    #        L = max(-1.414214, -1.2) = -1.2 on both tokens (clipped, no gradient)
    # seq 1: log-ratios [0, 0, (masked: 5)] -> s = 1, A = -1 -> L = 1 on the 2 valid tokens
    # seq-mean-token-mean: (-1.2 + 1) / 2 = -0.1; clip_frac = 2 of 4 valid tokens
    # grad seq 1: d(-A s)/dlogp_t = s / |y| = 1/2, times 1/2 (mean over seqs) = 0.25
    old = t([[-1.0, -2.0, -1.0], [-0.5, -0.3, -1.0]])
    new = (old + t([[LN(2.0), 0.0, 0.0], [0.0, 0.0, 5.0]])).requires_grad_()
    adv = t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    loss, metrics = gspo(new, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert loss.item() == pytest.approx(-0.1)
    assert metrics["clip_frac"].item() == pytest.approx(0.5)
    assert metrics["ratio_mean"].item() == pytest.approx((math.sqrt(2) + 1) / 2)
    # approx_kl = -mean of valid token log-ratios = -(ln 2) / 4 = -0.173287
    assert metrics["approx_kl"].item() == pytest.approx(-LN(2.0) / 4)
    loss.backward()
    assert new.grad is not None
    torch.testing.assert_close(new.grad, t([[0.0, 0.0, 0.0], [0.25, 0.25, 0.0]]))


def test_gspo_default_bounds_are_the_papers() -> None:
    # s = 1.0005 on a 1-token sequence; defaults eps_low 3e-4, eps_high 4e-4
    # A = +1: L = max(-1.0005, -1.0004) = -1.0004; A = -1: L = max(1.0005, 1.0004) = 1.0005
    old = t([[0.0], [0.0]])
    new = old + LN(1.0005)
    loss, _ = gspo(new, old, t([[1.0], [0.0]]), torch.ones(2, 1))
    assert loss.item() == pytest.approx(-1.0004 / 2)
    # s = 0.9996 < 1 - 3e-4 = 0.9997, A = -1: L = max(0.9996, 0.9997) = 0.9997
    new = old + LN(0.9996)
    loss, _ = gspo(new, old, t([[-1.0], [0.0]]), torch.ones(2, 1))
    assert loss.item() == pytest.approx(0.9997 / 2)


# ------------------------------------------------------------------ importance sampling


def test_importance_sampling_plain_and_truncated() -> None:
    # rho = [2, 0.5], A = [1, -2]: L = [-2, 1], token-mean = -0.5
    # grad = -A w / 2 = [-1, 0.5]
    old = t([[-1.0, -1.0]])
    new = (old + t([[LN(2.0), LN(0.5)]])).requires_grad_()
    adv = t([[1.0, -2.0]])
    loss, metrics = importance_sampling(new, old, adv, torch.ones(1, 2))
    assert loss.item() == pytest.approx(-0.5)
    assert metrics["clip_frac"].item() == 0.0
    loss.backward()
    assert new.grad is not None
    torch.testing.assert_close(new.grad, t([[-1.0, 0.5]]))
    # truncated at 1.5: w = [1.5, 0.5] -> L = [-1.5, 1], mean -0.25; the truncated token
    # keeps a gradient scaled by 1.5: grad = [-1.5 / 2, 0.5] = [-0.75, 0.5]
    new.grad = None
    loss, metrics = importance_sampling(new, old, adv, torch.ones(1, 2), max_ratio=1.5)
    assert loss.item() == pytest.approx(-0.25)
    assert metrics["clip_frac"].item() == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(new.grad, t([[-0.75, 0.5]]))
    with pytest.raises(ValueError, match="max_ratio"):
        importance_sampling(new, old, adv, torch.ones(1, 2), max_ratio=0.0)
