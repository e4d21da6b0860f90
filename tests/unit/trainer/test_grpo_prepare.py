"""GRPO ``prepare_batch`` and the generic step, on a plain-PyTorch engine (no DeepSpeed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.config.sections.algorithm import RolloutCorrectionConfig
from nexrl.trainer import SelfHostedGrpoTrainer, SelfHostedTrainer, TrainerError
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, KL_PENALTIES, token_level_from_scalar
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import plain_trainer


def test_old_log_probs_rewards_and_advantages(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir))
    raw = make_batch(vocab_size, model_dir=tiny_model_dir)
    raw.tensors["old_log_probs"] = torch.zeros_like(raw["old_log_probs"])  # must be recomputed
    batch, _ = trainer.prepare_batch(raw)
    expected = make_batch(vocab_size, model_dir=tiny_model_dir)["old_log_probs"]
    assert torch.allclose(batch["old_log_probs"], expected, atol=1e-5)
    rewards = batch["token_level_rewards"]
    assert torch.equal(rewards.sum(-1), batch["rewards"])
    last = (batch["response_mask"] * torch.arange(1, batch.response_width + 1)).argmax(-1)
    assert torch.equal(rewards[torch.arange(len(batch)), last], batch["rewards"])
    adv, _ = ADVANTAGE_ESTIMATORS.get("grpo")(
        rewards, batch["response_mask"].bool(), batch["group_ids"], batch["run_ids"]
    )
    assert torch.equal(batch["advantages"], adv) and adv.abs().sum() > 0


def test_zero_variance_groups_are_dropped(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir, algorithm={"filter_zero_variance_groups": True}))
    raw = make_batch(vocab_size, groups=3, group_size=4)
    raw.tensors["rewards"][raw["group_ids"] == 1] = 1.0  # group 1 carries no signal
    batch, metrics = trainer.prepare_batch(raw)
    assert len(batch) == 8 and 1 not in batch["group_ids"].tolist()
    assert metrics["filter/dropped_group_frac"] == pytest.approx(1 / 3)


def test_all_groups_filtered_skips_the_update(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir, algorithm={"filter_zero_variance_groups": True}))
    raw = make_batch(vocab_size, groups=2, group_size=2)
    raw.tensors["rewards"][:] = 1.0
    before = trainer.full_state_dict()["lm_head.weight"].clone()
    metrics = trainer.train_step(raw)
    assert metrics["actor/update_skipped"] == 1.0 and trainer.policy_version == 0
    assert trainer.global_step == 1
    assert torch.equal(trainer.full_state_dict()["lm_head.weight"], before)


def test_tis_weights_come_from_old_vs_rollout_log_probs(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    tis = plain_trainer(
        spec(
            tiny_model_dir,
            algorithm={"rollout_correction": RolloutCorrectionConfig(mode="tis", threshold=2.0)},
        )
    )
    raw = make_batch(vocab_size, model_dir=tiny_model_dir)
    shift = torch.zeros_like(raw["behaviour_log_probs"])
    shift[::2] = math.log(3.0)  # behaviour 3x less likely -> weight min(3, 2) = 2
    shift[1::4] = math.log(1.5)  # -> weight 1.5
    raw.tensors["behaviour_log_probs"] = raw["behaviour_log_probs"] - shift
    b, metrics = tis.prepare_batch(raw)
    valid = raw["response_mask"].bool()
    weight = torch.where(valid, torch.exp(shift).clamp(max=2.0), 0.0)
    assert torch.allclose(b["rollout_is_weights"], weight, atol=1e-5)
    # Mean over valid response tokens of the truncated weights (1, 1.5 or 2 per row).
    assert metrics["rollout_corr/weight_mean"] == pytest.approx(float(weight[valid].mean()))


def test_kl_in_reward_subtracts_the_penalty(tiny_model_dir: Path, vocab_size: int) -> None:
    algo = {"use_kl_in_reward": True, "kl_loss_coef": 0.5, "kl_penalty": "k1"}
    trainer = plain_trainer(spec(tiny_model_dir, algorithm=algo))
    assert trainer.ref_model is not None and not trainer.use_kl_loss
    batch = make_batch(vocab_size, model_dir=tiny_model_dir)
    trainer.train_step(batch)  # move the policy away from the reference
    out, metrics = trainer.prepare_batch(make_batch(vocab_size, model_dir=tiny_model_dir))
    mask = out["response_mask"].bool()
    kl = KL_PENALTIES.get("k1")(out["old_log_probs"], out["ref_log_probs"], mask)
    expected = token_level_from_scalar(out["rewards"], out["response_mask"]) - 0.5 * kl
    assert torch.allclose(out["token_level_rewards"], expected, atol=1e-6)
    assert metrics["actor/reward_kl"] != 0.0


def test_kl_loss_term_and_metrics(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir, algorithm={"kl_loss_coef": 0.1}))
    assert trainer.use_kl_loss
    batch = make_batch(vocab_size, model_dir=tiny_model_dir)
    first = trainer.train_step(batch)
    second = trainer.train_step(batch)
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # policy == reference
    assert second["actor/kl_loss"] > 0
    for key in (
        "actor/loss",
        "actor/pg_clipfrac",
        "actor/entropy",
        "actor/grad_norm",
        "critic/advantages/mean",
        "critic/rewards/mean",
        "response_length/mean",
        "perf/tokens_per_s",
        "timing/update",
        "timing/ref_log_prob",
    ):
        assert math.isfinite(first[key]), key
    # one PPO epoch: the old log-probs came from the update's own forward
    assert "timing/old_log_prob" not in first


class _SeparateOldForward(SelfHostedGrpoTrainer):
    """The trainer as it was: old log-probs from their own forward before the update."""

    def _old_log_probs_from_update(self) -> bool:
        return False


@pytest.mark.parametrize("micro", [16, 5])
def test_old_log_probs_from_the_update_forward_change_nothing(
    tiny_model_dir: Path, vocab_size: int, micro: int
) -> None:
    """One PPO epoch: the update's forward gives the old log-probs (weights move only
    after the last micro-batch), so two steps train exactly as with the separate
    forward: same losses, clip fractions, mismatch metrics and weights."""
    cfg = spec(tiny_model_dir, trainer={"micro_batch_size": micro, "lr": 5e-2})
    fused, separate = plain_trainer(cfg), plain_trainer(cfg, cls=_SeparateOldForward)
    assert fused._old_log_probs_from_update() and not separate._old_log_probs_from_update()
    for seed in (0, 1):  # the second step runs on moved weights: old != behaviour
        a = fused.train_step(make_batch(vocab_size, seed=seed, model_dir=tiny_model_dir))
        b = separate.train_step(make_batch(vocab_size, seed=seed, model_dir=tiny_model_dir))
        assert "timing/old_log_prob" not in a and "timing/old_log_prob" in b
        for key in ("actor/loss", "actor/pg_clipfrac", "actor/grad_norm", "actor/entropy"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key
        corr = [k for k in b if k.startswith("rollout_corr/")]
        assert corr, sorted(b)
        for key in corr:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    wa, wb = fused.full_state_dict(), separate.full_state_dict()
    for k, v in wa.items():
        assert torch.allclose(v, wb[k], atol=1e-6), k


@pytest.mark.parametrize(
    "settings",
    [
        {"trainer": {"ppo_epochs": 2}},
        {"algorithm": {"rollout_correction": RolloutCorrectionConfig(mode="tis")}},
        {"algorithm": {"use_kl_in_reward": True, "kl_loss_coef": 0.5}},
        {"algorithm": {"do_old_log_prob_compute": False}},
    ],
)
def test_old_log_probs_keep_their_own_forward_when_needed_before_the_update(
    tiny_model_dir: Path, vocab_size: int, settings: dict[str, Any]
) -> None:
    trainer = plain_trainer(spec(tiny_model_dir, **settings))
    assert not trainer._old_log_probs_from_update()


def test_micro_batching_matches_one_full_batch(tiny_model_dir: Path, vocab_size: int) -> None:
    """Same gradient (norm and direction) for any micro-batch size.

    Adam's update is invariant to the gradient's scale, so the gradient norm is
    compared too: a wrong loss scaling would change it but not the weights.
    """
    batch = make_batch(vocab_size, groups=3, group_size=4, model_dir=tiny_model_dir)
    runs = []
    for micro in (2, 5, 12):
        trainer = plain_trainer(spec(tiny_model_dir, trainer={"micro_batch_size": micro}))
        metrics = trainer.train_step(batch)
        runs.append((metrics, trainer.full_state_dict()))
    (m0, w0), rest = runs[0], runs[1:]
    for m, w in rest:
        assert m["actor/grad_norm"] == pytest.approx(m0["actor/grad_norm"], rel=1e-5)
        assert m["actor/loss"] == pytest.approx(m0["actor/loss"], rel=1e-5, abs=1e-7)
        for k, v in w0.items():  # lr 1e-2: Adam moves every weight by ~1e-2
            assert torch.allclose(v, w[k], atol=1e-4), k


def test_base_trainer_needs_advantages(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir), cls=SelfHostedTrainer)
    with pytest.raises(TrainerError, match=r"no 'advantages'.*prepare_batch"):
        trainer.train_step(make_batch(vocab_size))


def test_sft_loss_is_response_cross_entropy(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = plain_trainer(spec(tiny_model_dir, trainer={"type": "self_hosted_sft"}))
    assert trainer.ref_model is None
    batch = make_batch(vocab_size, model_dir=tiny_model_dir)
    metrics = trainer.train_step(batch)
    lp, mask = batch["old_log_probs"], batch["response_mask"].bool()
    assert metrics["actor/sft_loss"] == pytest.approx(float(-lp[mask].mean()), rel=1e-5)
