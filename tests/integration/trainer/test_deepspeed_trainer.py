"""The trainers on real DeepSpeed (CPU accelerator, gloo, world size 1, in this process)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from backends.inference.embedded.weights import load_snapshot
from nexrl.core.types.batch import Batch
from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.trainer import create_trainer
from nexrl.trainer.ops import model_inputs
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import plain_trainer

os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**model_inputs(batch)).logits


def test_sft_loss_decreases_on_a_fixed_batch(tiny_model_dir: Path, vocab_size: int) -> None:
    trainer = create_trainer(spec(tiny_model_dir, trainer={"type": "self_hosted_sft", "lr": 1e-2}))
    batch = make_batch(vocab_size, groups=2, group_size=4)
    losses = [trainer.train_step(batch)["actor/sft_loss"] for _ in range(5)]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.8 * losses[0]


def test_grpo_loss_decreases_and_good_responses_gain_probability(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    s = spec(
        tiny_model_dir,
        trainer={"lr": 2e-3, "ppo_epochs": 1},
        algorithm={
            "do_old_log_prob_compute": False,
            "clip_ratio_high": 10.0,
            "clip_ratio_low": 0.9,
        },
    )
    trainer = create_trainer(s)
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    losses = []
    for _ in range(4):
        losses.append(trainer.train_step(batch)["actor/pg_loss"])
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    prepared, _ = trainer.prepare_batch(batch)
    new = trainer.compute_log_probs(prepared)
    gain = (new - batch["behaviour_log_probs"])[prepared["response_mask"].bool()]
    adv = prepared["advantages"][prepared["response_mask"].bool()]
    assert gain[adv > 0].mean() > 0 > gain[adv < 0].mean()


def test_deepspeed_update_equals_a_plain_pytorch_update(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    """ZeRO-1 with micro-batches of 3 vs a plain loop on the whole batch: same step."""
    batch = make_batch(vocab_size, groups=3, group_size=4, model_dir=tiny_model_dir)
    common = {"lr": 1e-3, "grad_clip": 1.0, "weight_decay": 0.01}
    ds = create_trainer(spec(tiny_model_dir, trainer={**common, "micro_batch_size": 3}))
    plain = plain_trainer(spec(tiny_model_dir, trainer={**common, "micro_batch_size": 12}))
    for _ in range(2):
        a, b = ds.train_step(batch), plain.train_step(batch)
        assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-4)
        assert a["actor/pg_clipfrac"] == pytest.approx(b["actor/pg_clipfrac"], abs=1e-6)
    wa, wb = ds.full_state_dict(), plain.full_state_dict()
    assert wa is not None
    for k, v in wb.items():
        assert torch.allclose(wa[k], v, atol=1e-5), k


def test_gradient_checkpointing_recomputes_and_gives_the_same_update(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    """``trainer.gradient_checkpointing``: the decoder layers run again in backward
    (counted by a pre-forward hook on a layer's MLP), through transformers' current API (no deprecation
    warning), and the update is the one without it."""
    import warnings

    batch = make_batch(vocab_size, groups=3, group_size=4, model_dir=tiny_model_dir)
    common = {"lr": 1e-3, "grad_clip": 1.0, "micro_batch_size": 12}
    results = {}
    for on in (True, False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = create_trainer(
                spec(tiny_model_dir, trainer={**common, "gradient_checkpointing": on})
            )
        assert not [w for w in caught if "checkpointing" in str(w.message)]
        module: Any = trainer.engine.module
        assert module.is_activation_checkpointing is on
        calls: list[int] = []
        # the MLP inside the first decoder layer: the recompute runs the layer's forward
        # body (transformers checkpoints inside forward), which calls its submodules; a
        # pre-hook, as torch's recompute may stop once it has what backward needs
        hook = module.model.layers[0].mlp.register_forward_pre_hook(lambda *_, c=calls: c.append(1))
        metrics = trainer.train_step(batch)
        hook.remove()
        results[on] = (len(calls), metrics["actor/grad_norm"], trainer.full_state_dict())
        trainer.close()
    (calls_on, norm_on, w_on), (calls_off, norm_off, w_off) = results[True], results[False]
    assert calls_on > calls_off  # the layer's forward ran again to rebuild activations
    assert norm_on == pytest.approx(norm_off, rel=1e-5)
    assert w_on is not None and w_off is not None
    for k, v in w_off.items():
        assert torch.allclose(w_on[k], v, atol=1e-6), k


@pytest.mark.parametrize("stage", [2, 3])
def test_snapshot_reload_gives_identical_logits(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path, stage: int
) -> None:
    s = spec(
        tiny_model_dir,
        trainer={"zero_stage": stage},
        snapshot_dir=str(tmp_path / "snaps"),
        keep_snapshots=1,
    )
    trainer = create_trainer(s)
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    for _ in range(2):
        metrics = trainer.train_step(batch)
    assert metrics["weight/published_version"] == 2.0
    version, path = latest_snapshot(tmp_path / "snaps") or (None, None)
    assert version == 2 and path is not None
    reloaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    trainer.engine.train(False)
    with torch.no_grad():
        expected = trainer.engine.forward(**model_inputs(batch)).logits
    assert torch.equal(_logits(reloaded, batch), expected)
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    load_snapshot(path, device=torch.device("cpu"), dtype=torch.float32, reference=ref)
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == ["latest", "v2"]


@pytest.mark.parametrize("stage", [1, 3])
def test_resume_continues_as_if_uninterrupted(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path, stage: int
) -> None:
    """4 steps straight == 2 steps, checkpoint, a new trainer resuming, 2 more steps."""
    batches = [make_batch(vocab_size, groups=2, group_size=4, seed=i) for i in range(4)]
    settings = {
        "trainer": {
            "lr": 3e-3,
            "lr_scheduler": "cosine",
            "warmup_steps": 1,
            "total_train_steps": 4,
            "save_every": 2,
            "zero_stage": stage,
        },
        "algorithm": {"kl_loss_coef": 0.05, "kl_controller": "adaptive", "kl_target": 0.01},
    }
    straight = create_trainer(spec(tiny_model_dir, **settings))
    expected = [straight.train_step(b) for b in batches]

    first = create_trainer(spec(tiny_model_dir, checkpoint_dir=str(tmp_path / "ck"), **settings))
    for b in batches[:2]:
        first.train_step(b)
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step_2"
    first.close()

    resumed = create_trainer(
        spec(tiny_model_dir, checkpoint_dir=str(tmp_path / "ck"), resume_mode="auto", **settings)
    )
    assert resumed.resumed_from == tmp_path / "ck" / "step_2"
    assert (resumed.global_step, resumed.policy_version) == (2, 2)
    got = [resumed.train_step(b) for b in batches[2:]]
    for e, g in zip(expected[2:], got, strict=True):
        assert g["actor/lr"] == pytest.approx(e["actor/lr"])
        assert g["actor/kl_coef"] == pytest.approx(e["actor/kl_coef"])
        assert g["actor/grad_norm"] == pytest.approx(e["actor/grad_norm"], rel=1e-4)
    wa, wb = straight.full_state_dict(), resumed.full_state_dict()
    assert wa is not None and wb is not None
    for k, v in wa.items():
        assert torch.allclose(v, wb[k], atol=1e-6), k
    assert (tmp_path / "ck" / "latest").read_text().strip() == "step_4"  # the final checkpoint


# cosine, no warm-up, lr 3e-3: f(s) = (1 + cos(pi s / T)) / 2 for the s-th update
LR = 3e-3
COS_4 = [LR * 1.0, LR * 0.8535533905932737, LR * 0.5, LR * 0.14644660940672624]  # T = 4


def _schedule_settings(total: int, schedule_steps: int | None = None) -> dict[str, Any]:
    return {
        "trainer": {
            "lr": LR,
            "lr_scheduler": "cosine",
            "total_train_steps": total,
            "lr_schedule_steps": schedule_steps,
        }
    }


def _run_then_resume(
    model_dir: Path, vocab_size: int, ck: Path, first: dict[str, Any], second: dict[str, Any]
) -> tuple[list[float], Any]:
    """Two steps under ``first`` (checkpointed at its end), then a new trainer resuming
    under ``second`` to step 4: the lr of each of the 4 steps, and the resumed trainer."""
    batches = [make_batch(vocab_size, groups=2, group_size=4, seed=i) for i in range(4)]
    a = create_trainer(spec(model_dir, checkpoint_dir=str(ck), **first))
    lrs = [a.train_step(b)["actor/lr"] for b in batches[:2]]
    assert (ck / "latest").read_text().strip() == "step_2"
    a.close()
    b = create_trainer(spec(model_dir, checkpoint_dir=str(ck), resume_mode="auto", **second))
    assert b.global_step == 2
    lrs += [b.train_step(x)["actor/lr"] for x in batches[2:]]
    return lrs, b


@pytest.mark.parametrize("stage", [1, 3])
def test_a_short_run_on_the_full_schedule_resumes_seamlessly(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path, stage: int
) -> None:
    """total_train_steps=2 lr_schedule_steps=4, resumed with total_train_steps=4: the
    4-step cosine, step for step, and no warning."""
    first = _schedule_settings(2, schedule_steps=4)
    first["trainer"]["zero_stage"] = stage
    second = _schedule_settings(4)
    second["trainer"]["zero_stage"] = stage
    lrs, resumed = _run_then_resume(tiny_model_dir, vocab_size, tmp_path / "ck", first, second)
    assert lrs == pytest.approx(COS_4)
    assert resumed.schedule_note is None


def test_a_decayed_run_resumed_with_more_steps_continues_on_the_longer_schedule(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """A 2-step cosine (lr 3e-3, then 1.5e-3, ending at 0) resumed with
    total_train_steps=4: steps 3 and 4 take the 4-step cosine's lr at updates 2 and 3
    (not 0.0, and not a fresh cosine from 3e-3), with a note saying the end moved."""
    lrs, resumed = _run_then_resume(
        tiny_model_dir, vocab_size, tmp_path / "ck", _schedule_settings(2), _schedule_settings(4)
    )
    assert lrs == pytest.approx([LR, LR * 0.5, COS_4[2], COS_4[3]])
    assert resumed.schedule_note == (
        "the cosine LR schedule now ends at step 4 (the checkpoint's run had it end at "
        "step 2): from step 3 the lr follows the 4-step schedule (0 -> 0.0015); set "
        "trainer.lr_schedule_steps=2 to keep the old end"
    )


def test_a_resume_takes_the_recipes_lr(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """trainer.lr changed on resume: the schedule continues from the new base lr."""
    second = _schedule_settings(4, schedule_steps=4)
    second["trainer"]["lr"] = 2 * LR
    lrs, _ = _run_then_resume(
        tiny_model_dir, vocab_size, tmp_path / "ck", _schedule_settings(2, 4), second
    )
    assert lrs == pytest.approx([COS_4[0], COS_4[1], 2 * COS_4[2], 2 * COS_4[3]])
