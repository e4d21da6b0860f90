"""A poisoned batch in a whole run of the default recipe: its update is skipped,
counted in metrics.jsonl and on the progress line, and the run goes on; a run
whose every step is poisoned stops with one clear error, its rows kept.

The poison is a NaN advantage, injected by a custom trainer (``trainer.custom_trainer``)
after GRPO's ``prepare_batch`` on the steps listed in its file.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nexrl.driver.controller import Controller, ControllerError
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows

TRAINER = """
import math

from nexrl.trainer.grpo import SelfHostedGrpoTrainer

POISONED = {steps}


class PoisonedTrainer(SelfHostedGrpoTrainer):
    def prepare_batch(self, batch):
        batch, metrics = super().prepare_batch(batch)
        if self.global_step + 1 in POISONED:
            batch["advantages"][0, 0] = math.nan
        return batch, metrics
"""


def _trainer(tmp_path: Path, steps: set[int]) -> str:
    path = tmp_path / "poisoned_trainer.py"
    path.write_text(TRAINER.format(steps=sorted(steps)))
    return f"trainer.custom_trainer={path}:PoisonedTrainer"


def test_a_poisoned_step_is_skipped_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(RECIPE, overrides(out, _trainer(tmp_path, {2}), steps=3))
    assert Controller(recipe, progress=False).run().steps == 3
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["train/skipped_nonfinite"] for r in rows] == [0.0, 1.0, 0.0]
    assert [r["train/skipped_nonfinite_total"] for r in rows] == [0.0, 1.0, 1.0]
    assert [r["trainer/policy_version"] for r in rows] == [1.0, 1.0, 2.0]
    assert rows[1]["actor/loss"] is None  # NaN: written as null
    assert math.isfinite(rows[2]["actor/loss"])
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if line.startswith("warning: step 2: ")]
    assert len(warned) == 1 and "NaN/inf" in warned[0] and "skipped" in warned[0]
    assert any(
        line.startswith("step 3/3 ") and "nan_skipped=1" in line for line in err.splitlines()
    )


def test_a_run_of_only_poisoned_steps_stops_with_a_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(out, _trainer(tmp_path, {1, 2, 3, 4}), "trainer.max_nonfinite_steps=2", steps=4),
    )
    with pytest.raises(ControllerError) as err:
        Controller(recipe, progress=False).run()
    message = str(err.value)
    assert "NaN/inf for 2 steps in a row" in message
    assert "trainer.max_nonfinite_steps=2" in message
    rows = train_rows(out)  # what was written before the stop is kept
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["train/skipped_nonfinite"] == 1.0
