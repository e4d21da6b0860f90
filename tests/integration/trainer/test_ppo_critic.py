"""PPO with a value model (``trainer.type: self_hosted_ppo``) on real DeepSpeed (CPU, gloo,
world size 1, in this process): the critic's values, GAE through the trainer's path,
its update, its checkpoint and resume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.trainer import TrainerError, create_trainer
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS, token_level_from_scalar
from nexrl.trainer.critic import load_value_model
from nexrl.trainer.ops import model_inputs
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")


def ppo_spec(model_dir: Path, tmp_path: Path, **algorithm: object):
    from dataclasses import replace

    from nexrl.core.config.sections.trainer import CriticConfig

    s = spec(
        model_dir,
        trainer={"type": "self_hosted_ppo", "lr": 1e-3},
        algorithm={"advantage_estimator": "gae", "gamma": 1.0, "lam": 0.9, **algorithm},
        checkpoint_dir=str(tmp_path / "checkpoints"),
        snapshot_dir=str(tmp_path / "snapshots"),
    )
    s.trainer = replace(s.trainer, critic=CriticConfig(lr=1e-2, cliprange_value=0.5))
    return s


def test_first_step_gae_through_the_trainer_and_the_critic_learns(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    trainer = create_trainer(ppo_spec(tiny_model_dir, tmp_path))
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    prepared, _ = trainer.prepare_batch(make_batch(vocab_size, groups=2, group_size=4))
    mask = prepared["response_mask"].bool()
    # the value head starts at 0: with gamma 1 every policy token's return is the reward
    assert torch.equal(prepared["values"], torch.zeros_like(prepared["values"]))
    rewards = token_level_from_scalar(prepared["rewards"], prepared["response_mask"])
    want_adv, want_ret = ADVANTAGE_ESTIMATORS.get("gae")(
        rewards, mask, values=torch.zeros_like(rewards), gamma=1.0, lam=0.9
    )
    assert torch.allclose(prepared["returns"], want_ret) and torch.allclose(
        prepared["advantages"], want_adv
    )
    last = (mask * torch.arange(1, mask.shape[1] + 1)).argmax(-1)  # V = 0, gamma 1: R = r
    assert torch.equal(prepared["returns"][torch.arange(len(last)), last], prepared["rewards"])

    rows = [trainer.train_step(batch) for _ in range(6)]
    for key in (
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/vpred_mean",
        "critic/vf_explained_var",
        "critic/grad_norm",
        "critic/lr",
    ):
        assert key in rows[0], key
    assert rows[0]["critic/lr"] == pytest.approx(1e-2) and rows[0]["actor/lr"] == pytest.approx(
        1e-3
    )
    # the same batch six times: the value loss falls, the critic explains more of it
    assert rows[-1]["critic/vf_loss"] < 0.5 * rows[0]["critic/vf_loss"], rows
    assert rows[-1]["critic/vf_explained_var"] > rows[0]["critic/vf_explained_var"]
    assert trainer.policy_version == 6

    # the snapshot inference loads is the policy's alone (no value head in it)
    found = latest_snapshot(tmp_path / "snapshots")
    assert found is not None
    from safetensors.torch import load_file

    names = set().union(*(load_file(f).keys() for f in Path(found[1]).glob("*.safetensors")))
    assert "lm_head.weight" in names and not any("score" in n for n in names)
    trainer.close()


def _critic_weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.critic.engine.module.state_dict().items()}


def test_the_critic_is_checkpointed_and_resumed(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    first = create_trainer(ppo_spec(tiny_model_dir, tmp_path))
    for _ in range(2):
        first.train_step(batch)
    path = first.save_checkpoint()
    assert path is not None and (path / "critic").is_dir()
    saved = _critic_weights(first)
    after = first.train_step(batch)  # the step a resumed run must repeat exactly
    first.close()

    s = ppo_spec(tiny_model_dir, tmp_path)
    s.resume_mode = "auto"
    resumed = create_trainer(s)
    assert resumed.global_step == 2
    for k, v in _critic_weights(resumed).items():
        assert torch.equal(v, saved[k]), k
    again = resumed.train_step(batch)
    for key in ("critic/vf_loss", "critic/vpred_mean", "actor/pg_loss"):
        assert again[key] == pytest.approx(after[key], rel=1e-5, abs=1e-7), key
    resumed.close()


def test_the_value_head_starts_at_zero(tiny_model_dir: Path, vocab_size: int) -> None:
    model, packs = load_value_model(str(tiny_model_dir), check_packing=True)
    assert packs  # the tiny Qwen2's trunk keeps packed sequences apart
    batch = make_batch(vocab_size, groups=1, group_size=2)
    with torch.no_grad():
        out = model(**model_inputs(batch)).logits
    assert out.shape[-1] == 1 and torch.equal(out, torch.zeros_like(out))


def test_a_critic_free_estimator_on_the_ppo_trainer_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(TrainerError, match="self_hosted_grpo"):
        create_trainer(
            spec(
                tiny_model_dir,
                trainer={"type": "self_hosted_ppo"},
                algorithm={"advantage_estimator": "grpo"},
            )
        )


def test_nstep_through_the_trainer(tiny_model_dir: Path, vocab_size: int, tmp_path: Path) -> None:
    """algorithm.advantage_estimator: nstep, n_step 2, gamma 0.5, at step 1 (values 0):
    the reward r sits on the last policy token, so the returns are r there, 0.5 r on the
    policy token before it and 0 earlier."""
    s = ppo_spec(tiny_model_dir, tmp_path, advantage_estimator="nstep", n_step=2, gamma=0.5)
    trainer = create_trainer(s)
    prepared, _ = trainer.prepare_batch(make_batch(vocab_size, groups=2, group_size=4))
    mask = prepared["response_mask"].bool()
    order = mask.long().cumsum(-1) - mask.sum(-1, keepdim=True)  # 0 on the last token
    r = prepared["rewards"].unsqueeze(-1).expand_as(mask)
    want = torch.where(order == 0, r, torch.where(order == -1, 0.5 * r, 0.0)) * mask
    assert torch.allclose(prepared["returns"], want)
    row = trainer.train_step(make_batch(vocab_size, groups=2, group_size=4))
    assert row["critic/vf_loss"] > 0 and trainer.policy_version == 1
    trainer.close()
