"""The trainer's loss path against hand-computed fixtures.

Each test builds a ``Batch`` with known log-probs and advantages and goes
through what a step runs: ``SelfHostedGrpoTrainer.prepare_batch`` (advantages,
rollout correction) and ``compute_loss`` (the micro-batch loss) of a trainer
built from a spec (on a plain-PyTorch engine), so the recipe's ``algorithm``
section, resolved to each algorithm's own defaults, is what is tested.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.config.sections.algorithm import RolloutCorrectionConfig
from nexrl.core.types.batch import Batch
from nexrl.core.types.trajectory import Trajectory
from nexrl.driver.recipe import load_recipe_checked
from nexrl.trainer import TrainerError
from nexrl.trainer.spec import TrainerSpec
from tests.unit.trainer._helpers import spec
from tests.unit.trainer._plain_engine import plain_trainer

LN = math.log


def trainer_with(model_dir: Path, **algorithm: Any) -> Any:
    return plain_trainer(spec(model_dir, algorithm=algorithm))


def batch_of(
    lengths: list[int],
    *,
    rewards: list[float] | None = None,
    old: list[list[float]] | None = None,
    advantages: list[list[float]] | None = None,
    group: list[int] | None = None,
) -> Batch:
    """Rows with responses of ``lengths`` (0 = a padding row), padded to the longest.

    ``old`` / ``advantages`` are per valid token (float64); the rollout's
    log-probs start equal to ``old``.
    """
    trajs = []
    for i, n in enumerate(lengths):
        trajs.append(
            Trajectory(
                prompt_ids=[5, 6],
                response_ids=[7 + t for t in range(max(n, 1))],
                loss_mask=[1 if n else 0] * max(n, 1),
                logprobs=[-1.0] * max(n, 1),
                reward=(rewards or [0.0] * len(lengths))[i],
                group_id=(group or [0] * len(lengths))[i],
                run_id=i,
            )
        )
    batch = Batch.from_trajectories(trajs)
    width = batch.response_width

    def padded(rows: list[list[float]]) -> torch.Tensor:
        return torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)

    if old is not None:
        batch.tensors["old_log_probs"] = padded(old)
        batch.tensors["behaviour_log_probs"] = padded(old)
    if advantages is not None:
        batch.tensors["advantages"] = padded(advantages)
    return batch


# ------------------------------------------------------------------ GSPO's own defaults


def test_gspo_gets_its_own_bounds_and_sequence_aggregation(tiny_model_dir: Path) -> None:
    trainer = trainer_with(tiny_model_dir, policy_loss="gspo")
    algo = trainer.algo
    assert (algo.clip_ratio_low, algo.clip_ratio_high) == (3e-4, 4e-4)
    assert algo.loss_agg_mode == "seq-mean-token-mean"
    old = [[-1.0, -2.0], [-0.5, -0.3]]
    mb = batch_of([2, 2], old=old, advantages=[[1.0, 1.0], [-1.0, -1.0]])
    # seq 0: log-ratios [ln 2, 0] -> s0 = sqrt 2, A = +1: clipped at 1 + 4e-4
    #        -> L = -1.0004 on both tokens (no gradient)
    # seq 1: log-ratios [1e-4, 1e-4] -> s1 = exp(1e-4), inside [1 - 3e-4, 1 + 4e-4], A = -1
    #        -> L = s1 on both tokens
    # seq-mean-token-mean: (-1.0004 + exp(1e-4)) / 2
    shift = torch.tensor([[LN(2.0), 0.0], [1e-4, 1e-4]], dtype=torch.float64)
    log_probs = (mb["old_log_probs"] + shift).requires_grad_()
    loss, metrics = trainer.compute_loss(mb, log_probs, None)
    assert loss.item() == pytest.approx((-1.0004 + math.exp(1e-4)) / 2, abs=1e-12)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.5)
    loss.backward()
    # seq 1: d(-A s1)/d log_pi_t = s1 / |y| = s1 / 2, times 1/2 (mean over 2 sequences)
    expected = torch.tensor([[0.0, 0.0], [math.exp(1e-4) / 4] * 2], dtype=torch.float64)
    assert log_probs.grad is not None
    torch.testing.assert_close(log_probs.grad, expected)
    # PPO's bounds (0.2) would have clipped seq 0 at 1.2 instead: the recipe can ask for them.
    wide = trainer_with(tiny_model_dir, policy_loss="gspo", clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss, _ = wide.compute_loss(mb, mb["old_log_probs"] + shift, None)
    assert loss.item() == pytest.approx((-1.2 + math.exp(1e-4)) / 2, abs=1e-12)


def test_ppo_clip_keeps_ppo_bounds_and_token_mean(tiny_model_dir: Path) -> None:
    algo = trainer_with(tiny_model_dir).algo
    assert (algo.clip_ratio_low, algo.clip_ratio_high, algo.loss_agg_mode) == (
        0.2,
        0.2,
        "token-mean",
    )
    assert algo.norm_adv_by_std is True


# ----------------------------------------------------------------- aggregation modes

# Rows: 3 valid tokens with A = [1, 2, 3], 1 valid token with A = 4, a padding row.
# log_pi = old (ratio 1) -> ppo_clip's L_t = -A_t.
AGG_ADV = [[1.0, 2.0, 3.0], [4.0], []]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", -(1 + 2 + 3 + 4) / 4),  # 4 valid tokens
        ("seq-mean-token-sum", -(6 + 4) / 2),  # 2 non-empty sequences
        ("seq-mean-token-mean", -(6 / 3 + 4 / 1) / 2),
        ("seq-mean-token-sum-norm", -(6 / 5 + 4 / 5) / 2),  # C = loss_norm_length = 5
    ],
)
def test_each_aggregation_mode(tiny_model_dir: Path, mode: str, expected: float) -> None:
    trainer = trainer_with(tiny_model_dir, loss_agg_mode=mode, loss_norm_length=5.0)
    mb = batch_of([3, 1, 0], old=[[-1.0] * 3, [-1.0], []], advantages=AGG_ADV)
    loss, _ = trainer.compute_loss(mb, mb["old_log_probs"].clone(), None)
    assert loss.item() == pytest.approx(expected)


def test_constant_normaliser_needs_a_length(tiny_model_dir: Path) -> None:
    with pytest.raises(TrainerError, match=r"algorithm\.loss_norm_length"):
        trainer_with(tiny_model_dir, loss_agg_mode="seq-mean-token-sum-norm")


def test_constant_normaliser_defaults_to_the_max_response_length() -> None:
    recipe = load_recipe_checked(
        "recipes/max_digit/max_digit_tiny.yaml", ["algorithm.advantage_estimator=dr_grpo"]
    )
    max_len = recipe.cfg.rollout_worker.max_response_length
    assert recipe.cfg.algorithm.loss_agg_mode == "seq-mean-token-sum-norm"
    assert recipe.cfg.algorithm.loss_norm_length == max_len
    assert recipe.cfg.algorithm.norm_adv_by_std is False
    algo = TrainerSpec.from_recipe(recipe.spec, model_path="unused").algorithm
    assert (algo.loss_agg_mode, algo.loss_norm_length) == ("seq-mean-token-sum-norm", max_len)


# -------------------------------------------------------------------------- Dr.GRPO


def test_dr_grpo_no_std_and_constant_normaliser(tiny_model_dir: Path) -> None:
    trainer = trainer_with(
        tiny_model_dir,
        advantage_estimator="dr_grpo",
        loss_norm_length=8.0,
        do_old_log_prob_compute=False,
    )
    assert trainer.algo.loss_agg_mode == "seq-mean-token-sum-norm"
    assert trainer.algo.norm_adv_by_std is False
    lengths = [1, 3, 2, 4]
    old = [[-1.0] * n for n in lengths]
    raw = batch_of(lengths, rewards=[1.0, 1.0, 0.0, 0.0], old=old)
    batch, _ = trainer.prepare_batch(raw)
    # mean 0.5, no division by the std: A = +-0.5 (GRPO would give +-0.5 / 0.57735)
    expected_adv = torch.tensor([0.5, 0.5, -0.5, -0.5])
    valid = batch["response_mask"].bool()
    for i, n in enumerate(lengths):
        assert torch.allclose(batch["advantages"][i, :n].float(), expected_adv[i].expand(n))
    assert not batch["advantages"][~valid].any()
    # L_t = -A_t; token sums -0.5, -1.5, +1.0, +2.0 -> (1.0 / C) / 4 sequences = 1/32
    loss, _ = trainer.compute_loss(batch, batch["old_log_probs"].clone(), None)
    assert loss.item() == pytest.approx(1 / 32)


# ------------------------------------------------------------------ rollout correction

# Two rows; old log-probs (the trainer's) and d = old - rollout per valid token:
#   row 0 (reward 1, A = +0.5): d = [ln 3, ln 1.5]       token ratios 3, 1.5 (seq 4.5)
#   row 1 (reward 0, A = -0.5): d = [0, ln 0.5, ln 1.2]  token ratios 1, 0.5, 1.2 (seq 0.6)
# dr_grpo with token-mean; log_pi = old, so ppo_clip's L_t = -A_t w_t over kept tokens.
RC_OLD = [[-1.0, -2.0], [-0.5, -1.0, -1.5]]
RC_D = [[LN(3.0), LN(1.5)], [0.0, LN(0.5), LN(1.2)]]


def corrected(model_dir: Path, **rc: Any) -> tuple[Any, Batch, dict[str, float]]:
    trainer = trainer_with(
        model_dir,
        advantage_estimator="dr_grpo",
        loss_agg_mode="token-mean",
        do_old_log_prob_compute=False,
        rollout_correction=RolloutCorrectionConfig(**rc),
    )
    raw = batch_of([2, 3], rewards=[1.0, 0.0], old=RC_OLD)
    d = batch_of([2, 3], old=RC_D)["old_log_probs"]
    raw.tensors["behaviour_log_probs"] = raw["old_log_probs"] - d
    batch, metrics = trainer.prepare_batch(raw)
    return trainer, batch, metrics


@pytest.mark.parametrize(
    ("rc", "loss", "weight_mean", "clipped", "masked"),
    [
        # token TIS: w = [2, 1.5], [1, 0.5, 1.2]; L = [-1, -0.75], [0.5, 0.25, 0.6] / 5
        ({"mode": "tis"}, -0.4 / 5, 6.2 / 5, 1 / 5, 0.0),
        # token MIS: row 0 token 0 (ratio 3) masked; L = [-0.75], [0.5, 0.25, 0.6] / 4 kept
        ({"mode": "mis"}, 0.6 / 4, 4.2 / 5, 0.0, 1 / 5),
        # sequence TIS: w = 2 on row 0 (4.5 truncated), 0.6 on row 1
        #   L = [-1, -1], [0.3, 0.3, 0.3] / 5
        ({"mode": "tis", "level": "sequence"}, -1.1 / 5, (2 * 2 + 3 * 0.6) / 5, 2 / 5, 0.0),
        # sequence MIS: row 0 (4.5) masked; L = [0.3, 0.3, 0.3] / 3 kept
        ({"mode": "mis", "level": "sequence"}, 0.3, 1.8 / 5, 0.0, 2 / 5),
        # sequence MIS with a lower bound 0.7: row 1 (0.6) masked too: nothing left
        ({"mode": "mis", "level": "sequence", "threshold_low": 0.7}, 0.0, 0.0, 0.0, 1.0),
    ],
)
def test_tis_and_mis(
    tiny_model_dir: Path,
    rc: dict[str, Any],
    loss: float,
    weight_mean: float,
    clipped: float,
    masked: float,
) -> None:
    trainer, batch, metrics = corrected(tiny_model_dir, threshold=2.0, **rc)
    out, _ = trainer.compute_loss(batch, batch["old_log_probs"].clone(), None)
    assert out.item() == pytest.approx(loss)
    assert metrics["rollout_corr/weight_mean"] == pytest.approx(weight_mean)
    assert metrics["rollout_corr/clipped_frac"] == pytest.approx(clipped)
    assert metrics["rollout_corr/masked_frac"] == pytest.approx(masked)


def test_mismatch_metrics(tiny_model_dir: Path) -> None:
    _, _, metrics = corrected(tiny_model_dir, mode="none")
    # sum d = ln(3 * 1.5 * 1 * 0.5 * 1.2) = ln 2.7 over 5 tokens
    assert metrics["rollout_corr/kl_k1"] == pytest.approx(-LN(2.7) / 5)
    # k3 = mean(exp(d) - d - 1) = ((2 + 0.5 + 0 - 0.5 + 0.2) - ln 2.7) / 5
    assert metrics["rollout_corr/kl_k3"] == pytest.approx((2.2 - LN(2.7)) / 5)
    # mean old log-prob -6/5 -> trainer ppl e^1.2; rollout ppl e^(1.2 + ln 2.7 / 5)
    assert metrics["rollout_corr/trainer_ppl"] == pytest.approx(math.exp(1.2))
    assert metrics["rollout_corr/rollout_ppl"] == pytest.approx(math.exp(1.2 + LN(2.7) / 5))
    assert metrics["rollout_corr/ppl_ratio"] == pytest.approx(2.7**-0.2)
    assert metrics["rollout_corr/weight_mean"] == 1.0
    assert metrics["rollout_corr/clipped_frac"] == metrics["rollout_corr/masked_frac"] == 0.0


def test_mismatch_metrics_are_in_every_step_row(tiny_model_dir: Path) -> None:
    trainer = trainer_with(tiny_model_dir, rollout_correction=RolloutCorrectionConfig(mode="tis"))
    raw = batch_of([2, 3], rewards=[1.0, 0.0], old=RC_OLD)
    row = trainer.train_step(raw)  # old log-probs recomputed by the model: a real mismatch
    for key in ("kl_k1", "kl_k3", "ppl_ratio", "clipped_frac", "masked_frac", "weight_mean"):
        assert math.isfinite(row[f"rollout_corr/{key}"])
    assert row["rollout_corr/kl_k3"] > 0 and row["actor/update_skipped"] == 0.0


# ------------------------------------------------------------- importance_sampling


def test_importance_sampling_max_ratio_from_the_config(tiny_model_dir: Path) -> None:
    trainer = trainer_with(tiny_model_dir, policy_loss="importance_sampling", max_ratio=1.5)
    mb = batch_of([2], old=[[-1.0, -1.0]], advantages=[[1.0, 1.0]])
    shift = torch.tensor([[LN(2.0), LN(1.2)]], dtype=torch.float64)
    # w = [min(2, 1.5), 1.2]; L_t = -A w_t; token-mean = -(1.5 + 1.2) / 2
    loss, metrics = trainer.compute_loss(mb, mb["old_log_probs"] + shift, None)
    assert loss.item() == pytest.approx(-1.35)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(0.5)


# ----------------------------------------------------------------- recipe checks


def test_recipe_mistakes_in_the_algorithm_section_are_named() -> None:
    from nexrl.core.config.errors import RecipeError

    with pytest.raises(RecipeError) as info:
        load_recipe_checked(
            "recipes/max_digit/max_digit_tiny.yaml",
            [
                "algorithm.policy_loss=importance_sampling",
                "algorithm.clip_ratio_high=0.28",
                "algorithm.loss_agg_mode=seq-mean-token-men",
                "algorithm.rollout_correction.mode=tsi",
            ],
        )
    text = info.value.render()
    assert "algorithm.clip_ratio_high: policy loss 'importance_sampling' does not take it" in text
    assert "did you mean 'seq-mean-token-mean'" in text
    assert "algorithm.rollout_correction.mode: unknown mode 'tsi'" in text


def test_a_key_this_project_renamed_before_release_is_an_unknown_key() -> None:
    """``algorithm.off_policy_correction`` was this project's own name for
    ``rollout_correction.mode``, never released: it is not migrated but refused."""
    from nexrl.core.config.errors import RecipeError

    with pytest.raises(RecipeError) as info:
        load_recipe_checked(
            "recipes/max_digit/max_digit_tiny.yaml", ["+algorithm.off_policy_correction=tis"]
        )
    assert "algorithm.off_policy_correction" in info.value.render()
