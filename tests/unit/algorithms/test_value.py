"""GAE, n-step returns, the clipped value loss and explained variance
(nexrl.trainer.algorithms.value): hand-computed fixtures, verl's GAE on random batches, and the
identities between the two estimators."""

from __future__ import annotations

import math

import pytest
import torch

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS
from nexrl.trainer.algorithms.advantages import masked_whiten
from nexrl.trainer.algorithms.calls import call_advantage_estimator
from nexrl.trainer.algorithms.value import (
    clipped_value_loss,
    estimator_takes_values,
    explained_variance,
)

gae = ADVANTAGE_ESTIMATORS.get("gae")
nstep = ADVANTAGE_ESTIMATORS.get("nstep")


def verl_gae(rewards, values, mask, gamma, lam):
    """verl's compute_gae_advantage_return (verl/trainer/ppo/core_algos.py, the
    mask-aware version: values and TD errors of masked tokens are skipped), written
    out here as the reference: a loop over tokens from the last one back."""
    nextvalues = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    lastgaelam = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    out = []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        new = delta + gamma * lam * lastgaelam
        m = mask[:, t].to(rewards.dtype)
        nextvalues = values[:, t] * m + (1 - m) * nextvalues
        lastgaelam = new * m + (1 - m) * lastgaelam
        out.append(lastgaelam)
    advantages = torch.stack(out[::-1], dim=1)
    returns = advantages + values
    m = mask.to(rewards.dtype)
    mean = (advantages * m).sum() / m.sum()
    var = (((advantages - mean) ** 2) * m).sum() / m.sum() * (m.sum() / (m.sum() - 1))
    whitened = (advantages - mean) * torch.rsqrt(var + 1e-8)
    return whitened, returns


def test_gae_by_hand() -> None:
    # gamma 0.5, lam 0.5; one row r = [0, 0, 1], V = [0.2, 0.4, 0.6]:
    # delta = [0 + .5*.4 - .2, 0 + .5*.6 - .4, 1 - .6] = [0, -0.1, 0.4]
    # A = [0 + .25*0, -0.1 + .25*0.4, 0.4] = [0, 0, 0.4]; R = A + V = [0.2, 0.4, 1.0]
    # whitened: mean 2/15, unbiased var 0.16/3 -> [-1, -1, 2] / sqrt(3)
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.2, 0.4, 0.6]])
    adv, ret = gae(r, torch.ones(1, 3, dtype=torch.bool), values=v, gamma=0.5, lam=0.5)
    assert torch.allclose(ret, torch.tensor([[0.2, 0.4, 1.0]]))
    assert torch.allclose(adv, torch.tensor([[-1.0, -1.0, 2.0]]) / math.sqrt(3), atol=1e-6)


def test_gae_skips_masked_tokens_and_padding() -> None:
    # row 0: a tool token (mask 0, value 9) in the middle is not there for the recursion:
    #   policy tokens r = [0, 1], V = [0.2, 0.6] -> delta = [0.1, 0.4], A = [0.2, 0.4]
    # row 1: one policy token then padding: A = 1 - 0.5 = 0.5
    r = torch.tensor([[0.0, 5.0, 1.0], [1.0, 0.0, 0.0]])
    v = torch.tensor([[0.2, 9.0, 0.6], [0.5, 7.0, 7.0]])
    mask = torch.tensor([[1, 0, 1], [1, 0, 0]], dtype=torch.bool)
    adv, ret = gae(r, mask, values=v, gamma=0.5, lam=0.5)
    assert torch.allclose(ret, torch.tensor([[0.4, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    raw = torch.tensor([[0.2, 0.0, 0.4], [0.5, 0.0, 0.0]])
    assert torch.allclose(adv, masked_whiten(raw, mask))
    assert torch.equal(adv[~mask], torch.zeros(3))


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (1.0, 0.95), (0.99, 0.9), (0.7, 0.0)])
def test_gae_equals_verl_on_random_batches(gamma: float, lam: float) -> None:
    gen = torch.Generator().manual_seed(int(gamma * 100 + lam * 10))
    for _ in range(5):
        b, t = 16, 24
        rewards = torch.randn(b, t, generator=gen, dtype=torch.float64)
        values = torch.randn(b, t, generator=gen, dtype=torch.float64)
        lengths = torch.randint(1, t + 1, (b,), generator=gen)
        mask = torch.arange(t) < lengths.unsqueeze(-1)  # right padding
        mask &= torch.rand(b, t, generator=gen) > 0.2  # and tool tokens inside
        mask[:, 0] = True
        want_adv, want_ret = verl_gae(rewards, values, mask, gamma, lam)
        adv, ret = gae(rewards, mask, values=values, gamma=gamma, lam=lam)
        assert torch.allclose(adv[mask], want_adv[mask], atol=1e-9)
        assert torch.allclose(ret[mask], want_ret[mask], atol=1e-9)


def test_nstep_by_hand() -> None:
    # n 2, gamma 0.5, r = [0, 0, 1], V = [0.2, 0.4, 0.6]:
    # G0 = 0 + .5*0 + .25*V2 = 0.15; G1 = 0 + .5*1 + .25*0 = 0.5; G2 = 1
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.2, 0.4, 0.6]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    adv, ret = nstep(r, mask, values=v, gamma=0.5, n_step=2)
    assert torch.allclose(ret, torch.tensor([[0.15, 0.5, 1.0]]))
    assert torch.allclose(adv, masked_whiten(torch.tensor([[-0.05, 0.1, 0.4]]), mask))


def test_nstep_at_its_ends_is_gae_at_its_ends() -> None:
    gen = torch.Generator().manual_seed(3)
    rewards = torch.randn(8, 10, generator=gen, dtype=torch.float64)
    values = torch.randn(8, 10, generator=gen, dtype=torch.float64)
    mask = torch.rand(8, 10, generator=gen) > 0.3
    mask[:, 0] = True
    for n, lam in ((1, 0.0), (10, 1.0), (50, 1.0)):
        a, r = nstep(rewards, mask, values=values, gamma=0.9, n_step=n)
        b, s = gae(rewards, mask, values=values, gamma=0.9, lam=lam)
        assert torch.allclose(a, b, atol=1e-9) and torch.allclose(r, s, atol=1e-9), n


def test_the_trainer_call_passes_values_and_the_recipe_fields() -> None:
    algo = AlgorithmConfig(advantage_estimator="gae", gamma=0.5, lam=0.5)
    r = torch.tensor([[0.0, 0.0, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    v = torch.tensor([[0.2, 0.4, 0.6]])
    _, ret = call_advantage_estimator(algo, r, mask, torch.zeros(1), None, v)
    assert torch.allclose(ret, torch.tensor([[0.2, 0.4, 1.0]]))
    assert estimator_takes_values(gae) and estimator_takes_values(nstep)
    assert not estimator_takes_values(ADVANTAGE_ESTIMATORS.get("grpo"))
    with pytest.raises(ValueError, match="self_hosted_ppo"):
        call_advantage_estimator(algo, r, mask, torch.zeros(1), None)


def test_clipped_value_loss_by_hand() -> None:
    # c = 0.2, old 0, R 1: vpred 0.5 -> clipped 0.2: max(.25, .64)/2 = 0.32, clipped
    #                      vpred 0.1 -> clipped 0.1: .81/2 = 0.405, not clipped
    #                      vpred -0.5 (R 1, old 0) -> clipped -0.2: max(2.25, 1.44)/2
    vpred = torch.tensor([[0.5, 0.1, -0.5, 3.0]])
    old = torch.zeros(1, 4)
    ret = torch.ones(1, 4)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    loss, clipped = clipped_value_loss(vpred, old, ret, mask, 0.2)
    assert torch.allclose(loss, torch.tensor([[0.32, 0.405, 1.125, 0.0]]))
    assert clipped.tolist() == [[True, False, False, False]]


def test_explained_variance() -> None:
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    ret = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    assert explained_variance(ret, ret, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 2.0), ret, mask) == pytest.approx(0.0)
    # V = R - [1, 0, -1]: Var(R - V) = 2/3 = Var(R) -> 0; V = 0.5 R: 1 - 0.25
    assert explained_variance(ret * 0.5, ret, mask) == pytest.approx(0.75)
    assert math.isnan(explained_variance(ret, torch.ones(1, 4), mask))
