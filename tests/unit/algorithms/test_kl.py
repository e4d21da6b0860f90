"""KL penalties, KL controllers and entropy against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from nexrl.trainer.algorithms import KL_CONTROLLERS, KL_PENALTIES, entropy_from_logits
from nexrl.trainer.algorithms.kl import AdaptiveKLController, FixedKLController

# log_prob = [-1, -2, -0.5], ref = [-1.5, -1, -0.5] -> diff = log_prob - ref = [0.5, -1, 0]
LOG_PROB = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
REF = torch.tensor([[-1.5, -1.0, -0.5]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kl", [0.5, -1.0, 0.0]),
        ("k1", [0.5, -1.0, 0.0]),
        ("abs", [0.5, 1.0, 0.0]),
        ("mse", [0.125, 0.5, 0.0]),  # 0.5 * diff^2
        ("k2", [0.125, 0.5, 0.0]),
        # k3 with d = ref - log_prob = [-0.5, 1, 0]: exp(d) - d - 1
        #   exp(-0.5) + 0.5 - 1 = 0.6065307 - 0.5 = 0.1065307;  e - 2 = 0.7182818;  0
        ("low_var_kl", [0.1065307, 0.7182818, 0.0]),
        ("k3", [0.1065307, 0.7182818, 0.0]),
    ],
)
def test_kl_penalties(name: str, expected: list[float]) -> None:
    out = KL_PENALTIES.get(name)(LOG_PROB, REF)
    torch.testing.assert_close(
        out, torch.tensor([expected], dtype=torch.float64), atol=1e-7, rtol=0
    )


def test_low_var_kl_is_clamped_like_verl() -> None:
    # d = ref - log_prob = -30 -> clamp -20: exp(-20) + 20 - 1 = 19.0000... -> clamp 10
    # d = +30 -> clamp 20: exp(20) - 21 = 4.85e8 -> clamp 10;  d = 2: e^2 - 3 = 4.3890561
    log_prob = torch.tensor([[0.0, -30.0, -2.0]])
    ref = torch.tensor([[-30.0, 0.0, 0.0]])
    out = KL_PENALTIES.get("low_var_kl")(log_prob, ref)
    torch.testing.assert_close(out, torch.tensor([[10.0, 10.0, 4.3890561]]))


@pytest.mark.parametrize("name", KL_PENALTIES.names())
def test_kl_mask_zeroes_padding_even_with_inf(name: str) -> None:
    log_prob = torch.tensor([[-1.0, -math.inf], [math.nan, -0.2]], requires_grad=True)
    ref = torch.tensor([[-1.0, -math.inf], [-1.0, -math.inf]])
    mask = torch.tensor([[1, 0], [0, 0]])
    out = KL_PENALTIES.get(name)(log_prob, ref, mask)
    assert torch.equal(out.detach(), torch.zeros(2, 2))  # valid token has diff 0 -> 0 everywhere
    out.sum().backward()
    assert log_prob.grad is not None and torch.isfinite(log_prob.grad).all()


@pytest.mark.parametrize("name", KL_PENALTIES.names())
def test_kl_extreme_values_finite(name: str) -> None:
    log_prob = torch.tensor([[-3.0e38, 0.0, -1e20]])
    ref = torch.tensor([[0.0, -3.0e38, 0.0]])
    assert torch.isfinite(KL_PENALTIES.get(name)(log_prob, ref)).all()


def test_kl_shape_checks() -> None:
    with pytest.raises(ValueError, match="ref_log_prob shape"):
        KL_PENALTIES.get("kl")(LOG_PROB, REF[:, :2])
    with pytest.raises(ValueError, match="response_mask shape"):
        KL_PENALTIES.get("kl")(LOG_PROB, REF, torch.ones(1, 2))


# --------------------------------------------------------------------------- controllers


def test_fixed_controller_never_changes() -> None:
    ctrl = KL_CONTROLLERS.get("fixed")(kl_coef=0.05)
    ctrl.update(current_kl=100.0, n_steps=1000)
    assert ctrl.value == 0.05
    assert ctrl.state_dict() == {"type": "fixed", "value": 0.05}


def test_adaptive_controller_follows_ziegler_update() -> None:
    ctrl = AdaptiveKLController(kl_coef=0.1, target_kl=1.0, horizon=100)
    # kl 1.1: e = 0.1, mult = 1 + 0.1 * 50/100 = 1.05 -> 0.105
    ctrl.update(current_kl=1.1, n_steps=50)
    assert ctrl.value == pytest.approx(0.105)
    # kl 5: e = clip(4) = 0.2, mult = 1 + 0.2 * 10/100 = 1.02 -> 0.1071
    ctrl.update(current_kl=torch.tensor(5.0), n_steps=10)
    assert ctrl.value == pytest.approx(0.1071)
    # kl 0: e = clip(-1) = -0.2, mult = 1 - 0.2 * 100/100 = 0.8 -> 0.08568
    ctrl.update(current_kl=0.0, n_steps=100)
    assert ctrl.value == pytest.approx(0.08568)
    # n_steps = 10 x horizon: verl's mult would be 1 - 0.2 * 10 = -1 (negative coefficient);
    # capped at n_steps / horizon = 1 -> 0.8 -> 0.068544
    ctrl.update(current_kl=0.0, n_steps=1000)
    assert ctrl.value == pytest.approx(0.068544)
    # on target: unchanged
    ctrl.update(current_kl=1.0, n_steps=100)
    assert ctrl.value == pytest.approx(0.068544)


def test_controller_state_roundtrip() -> None:
    ctrl = AdaptiveKLController(kl_coef=0.1, target_kl=1.0, horizon=100)
    ctrl.update(current_kl=2.0, n_steps=100)  # 0.1 * 1.2 = 0.12
    state = ctrl.state_dict()
    assert state == {"type": "adaptive", "value": pytest.approx(0.12)}
    fresh = AdaptiveKLController(kl_coef=0.1, target_kl=1.0, horizon=100)
    fresh.load_state_dict(state)
    assert fresh.value == pytest.approx(0.12)
    with pytest.raises(ValueError, match="'adaptive' KL controller, not 'fixed'"):
        FixedKLController(0.1).load_state_dict(state)
    with pytest.raises(ValueError, match="finite"):
        fresh.load_state_dict({"type": "adaptive", "value": math.nan})


def test_controller_argument_validation() -> None:
    with pytest.raises(ValueError, match="coefficient"):
        FixedKLController(-1.0)
    with pytest.raises(ValueError, match="target_kl"):
        AdaptiveKLController(0.1, target_kl=0.0, horizon=10)
    with pytest.raises(ValueError, match="horizon"):
        AdaptiveKLController(0.1, target_kl=0.1, horizon=0)
    ctrl = AdaptiveKLController(0.1, target_kl=0.1, horizon=10)
    with pytest.raises(ValueError, match="current_kl"):
        ctrl.update(math.nan, 1)
    with pytest.raises(ValueError, match="n_steps"):
        ctrl.update(0.1, -1)
    assert ctrl.value == 0.1


# ------------------------------------------------------------------------------- entropy


def test_entropy_hand_values() -> None:
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4 = 1.3862944
            [0.0, math.log(3.0), -math.inf, -math.inf],  # p = [1/4, 3/4]: 0.5623351
            [5.0, -math.inf, -math.inf, -math.inf],  # one-hot: 0
            [-math.inf] * 4,  # no support: defined as 0
            [1e30, 1e30, -1e30, -1e30],  # huge logits, two-way tie: ln 2 = 0.6931472
            [1e4, 0.0, 0.0, 0.0],  # p = [1, e^-1e4, ...]: 0
        ]
    )
    expected = torch.tensor([1.3862944, 0.5623351, 0.0, 0.0, 0.6931472, 0.0])
    torch.testing.assert_close(entropy_from_logits(logits), expected)


def test_entropy_gradient_finite_with_banned_tokens() -> None:
    logits = torch.tensor(
        [[0.0, 1.0, -math.inf], [-math.inf, -math.inf, -math.inf]], requires_grad=True
    )
    entropy_from_logits(logits).sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    assert (logits.grad[:, 2] == 0).all() and (logits.grad[1] == 0).all()
    # dH/dz_i = -p_i (log p_i + H); p = [0.268941, 0.731059], H = 0.582203
    # -> [-0.268941 * (-1.313262 + 0.582203), ...] = [0.196612, -0.196612]
    torch.testing.assert_close(logits.grad[0, :2], torch.tensor([0.196612, -0.196612]))


def test_entropy_keeps_leading_dims() -> None:
    logits = torch.zeros(2, 3, 8)
    out = entropy_from_logits(logits)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out, torch.full((2, 3), math.log(8.0)))
