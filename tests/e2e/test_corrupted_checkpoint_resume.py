"""End-to-end: the newest checkpoint of a run is corrupted (a file truncated); the
same command resumes from the previous one, says so on the terminal, and finishes;
with every checkpoint corrupted the resume stops with a clear error instead of
starting again at step 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from nexrl.trainer.actor import TrainerGroupError
from tests.e2e._recipe import RECIPE, overrides, train_rows


def _truncate_largest(folder: Path) -> Path:
    path = max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)
    return path


def test_a_truncated_latest_checkpoint_resumes_from_the_previous_one(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """(``capfd``: the trainer's worker writes to the same terminal.)"""
    out = tmp_path / "run"
    first = load_recipe_checked(RECIPE, overrides(out, "trainer.save_every=1", steps=3))
    assert Controller(first, progress=False).run().steps == 3
    ck = out / "checkpoints"
    assert (ck / "latest").read_text().strip() == "step_3"
    damaged = _truncate_largest(ck / "step_3")
    capfd.readouterr()

    again = load_recipe_checked(RECIPE, overrides(out, "trainer.save_every=1", steps=4))
    assert Controller(again, progress=False).run().steps == 4
    err = capfd.readouterr().err
    warned = [line for line in err.splitlines() if line.startswith("warning: corrupted checkpoint")]
    assert len(warned) == 1, err[-3000:]
    # said once: the trainer's worker, which found it, does not say it too
    assert sum("corrupted checkpoint" in line for line in err.splitlines()) == 1, err[-3000:]
    assert str(damaged) in warned[0] and warned[0].endswith(f"resumed from {ck / 'step_2'} instead")
    # steps 3 and 4 were trained again on top of step 2's weights
    resumed_lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in resumed_lines] == ["3/4", "4/4"]
    rows = train_rows(out)
    assert rows[-1]["step"] == 4 and rows[-1]["trainer/policy_version"] == 4.0
    assert (ck / "latest").read_text().strip() == "step_4"


def test_every_checkpoint_corrupted_stops_instead_of_restarting(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = load_recipe_checked(RECIPE, overrides(out, "trainer.save_every=1", steps=2))
    assert Controller(first, progress=False).run().steps == 2
    for step in (1, 2):
        _truncate_largest(out / "checkpoints" / f"step_{step}")
    again = load_recipe_checked(RECIPE, overrides(out, "trainer.save_every=1", steps=3))
    with pytest.raises(TrainerGroupError, match=r"CheckpointError: every checkpoint under ") as err:
        Controller(again, progress=False).run()
    assert "is corrupted: " in str(err.value) and "resume.mode: disable" in str(err.value)
    assert [r["step"] for r in train_rows(out)] == [1, 2]  # nothing trained, nothing lost
