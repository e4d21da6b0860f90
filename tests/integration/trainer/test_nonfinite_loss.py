"""A poisoned batch (a NaN log-prob, as a broken inference server would send) on the real
DeepSpeed trainer (CPU, gloo): the update is skipped and counted, the run goes on,
and ``trainer.max_nonfinite_steps`` poisoned steps in a row stop it."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import pytest
import torch

from nexrl.core.types.batch import Batch
from nexrl.trainer import create_trainer
from nexrl.trainer.batch_io import load_batch, save_batch
from nexrl.trainer.errors import TrainerError
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _poisoned(vocab_size: int, tmp_path: Path, seed: int) -> Path:
    """A batch whose first trajectory's first behaviour log-prob is NaN (a NaN reward
    would not do: GRPO gives a group with a NaN reward no advantage), through the file
    the controller hands the trainer (``save_batch``)."""
    batch = make_batch(vocab_size, groups=2, group_size=4, seed=seed)
    assert batch["response_mask"][0, 0] == 1
    for key in ("old_log_probs", "behaviour_log_probs"):  # as Batch.from_trajectories fills them
        batch.tensors[key][0, 0] = math.nan
    path = tmp_path / f"poisoned_{seed}.pt"
    save_batch(batch, path)
    assert torch.isnan(load_batch(path)["behaviour_log_probs"][0, 0])
    return path


# the rollout's log-probs are the PPO ratio's denominator (no recomputation)
ALGO = {"do_old_log_prob_compute": False}


def _weights(trainer: object) -> dict[str, torch.Tensor]:
    state = trainer.full_state_dict()  # type: ignore[attr-defined]
    assert state is not None
    return {k: v.detach().clone() for k, v in state.items()}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_nan_loss_skips_the_update_and_the_run_goes_on(
    tiny_model_dir: Path,
    vocab_size: int,
    tmp_path: Path,
    stage: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    good: list[Batch] = [make_batch(vocab_size, groups=2, group_size=4, seed=s) for s in (1, 2)]
    settings = {"trainer": {"zero_stage": stage, "lr": 1e-2, "grad_clip": 1.0}, "algorithm": ALGO}
    poisoned = create_trainer(spec(tiny_model_dir, **settings))
    clean = create_trainer(spec(tiny_model_dir, **settings))

    first = poisoned.train_step(good[0])
    clean.train_step(good[0])
    before = _weights(poisoned)
    with caplog.at_level(logging.WARNING, logger="nexrl.trainer.base"):
        skipped = poisoned.train_step(_poisoned(vocab_size, tmp_path, seed=3))
    after = _weights(poisoned)
    assert all(torch.equal(before[k], after[k]) for k in before)  # bit-identical
    assert skipped["train/skipped_nonfinite"] == 1.0
    assert skipped["train/skipped_nonfinite_total"] == 1.0
    assert skipped["actor/update_skipped"] == 1.0
    assert not math.isfinite(skipped["actor/loss"])
    assert (skipped["trainer/global_step"], skipped["trainer/policy_version"]) == (2.0, 1.0)
    assert first["train/skipped_nonfinite"] == 0.0
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("nexrl")
    ]
    assert len(warnings) == 1 and warnings[0].startswith("step 2: the loss or gradient norm")

    # the next good batch trains as if the poisoned one had never come: the optimizer
    # state and the LR schedule were untouched
    a, b = poisoned.train_step(good[1]), clean.train_step(good[1])
    assert a["train/skipped_nonfinite"] == 0.0 and a["train/skipped_nonfinite_total"] == 1.0
    assert a["trainer/policy_version"] == 2.0
    assert a["actor/lr"] == b["actor/lr"]
    assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-6)
    wa, wb = _weights(poisoned), _weights(clean)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], after[k]) for k in wa)  # it did train


def test_max_nonfinite_steps_in_a_row_stop_with_a_clear_error(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    trainer = create_trainer(
        spec(tiny_model_dir, trainer={"max_nonfinite_steps": 2}, algorithm=ALGO)
    )
    good = make_batch(vocab_size, groups=2, group_size=4, seed=1)
    assert trainer.train_step(_poisoned(vocab_size, tmp_path, 1))["train/skipped_nonfinite"] == 1
    trainer.train_step(good)  # a good step ends the streak
    trainer.train_step(_poisoned(vocab_size, tmp_path, 2))
    with pytest.raises(TrainerError) as err:
        trainer.train_step(_poisoned(vocab_size, tmp_path, 3))
    message = str(err.value)
    assert message.startswith("step 4: the loss or gradient norm was NaN/inf for 2 steps in a row")
    assert "trainer.max_nonfinite_steps=2" in message and "\n" not in message
    assert (trainer.nonfinite_total, trainer.policy_version) == (3, 1)
