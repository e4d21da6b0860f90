"""The trainer's public hooks, and subclasses written against their old names."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.trainer import SelfHostedGrpoTrainer
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import plain_trainer


def _old_style() -> type[SelfHostedGrpoTrainer]:
    class OldStyle(SelfHostedGrpoTrainer):
        """Written when the hooks were private."""

        def _prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
            batch, metrics = super()._prepare_batch(batch)
            return batch, {**metrics, "custom/prepared": 1.0}

        def _compute_loss(
            self, mb: Batch, log_probs: Tensor, entropy: Tensor | None
        ) -> tuple[Tensor, dict[str, Tensor | float]]:
            loss, metrics = super()._compute_loss(mb, log_probs, entropy)
            return loss, {**metrics, "custom/loss": 2.0}

    return OldStyle


def test_a_subclass_on_the_old_names_warns_once_and_still_trains(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    with pytest.warns(FutureWarning) as seen:
        cls = _old_style()
    (warning,) = seen  # one per class, naming every old name it overrides
    message = str(warning.message)
    assert "OldStyle" in message
    assert "_prepare_batch is deprecated: override prepare_batch" in message
    assert "_compute_loss is deprecated: override compute_loss" in message
    assert Path(warning.filename).name == Path(__file__).name  # points at the class statement

    trainer = plain_trainer(spec(tiny_model_dir), cls=cls)
    assert not trainer._old_log_probs_from_update()  # its prepare_batch is not GRPO's own
    metrics = trainer.train_step(make_batch(vocab_size))
    assert metrics["custom/prepared"] == 1.0 and metrics["custom/loss"] == pytest.approx(2.0)
    assert "critic/advantages/mean" in metrics and trainer.policy_version == 1


def test_public_hooks_warn_nothing_and_subclass_an_old_style_class(
    tiny_model_dir: Path, vocab_size: int
) -> None:
    with pytest.warns(FutureWarning):
        old = _old_style()
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class NewStyle(old):  # type: ignore[valid-type,misc]
            def prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
                batch, metrics = super().prepare_batch(batch)
                return batch, {**metrics, "custom/new": 3.0}

    trainer: Any = plain_trainer(spec(tiny_model_dir), cls=NewStyle)
    batch, metrics = trainer._prepare_batch(make_batch(vocab_size))  # the old name calls it too
    assert metrics["custom/new"] == 3.0 and metrics["custom/prepared"] == 1.0
    assert "advantages" in batch
