"""Resuming a run with a changed recipe, through ``nexrl train`` as a user runs it.

* A resume with other settings says which ones changed (old -> new) and
  ``config.yaml`` records the new ones.
* A refused resume (other prompt data; another model: its checkpoint would keep
  training the old one) leaves ``config.yaml`` as it was, so it still shows the
  settings the run can continue with.
* A resume whose trajectory pool was deleted stops with one line naming the
  checkpoint, the store and what to do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests import _launch
from tests.e2e._recipe import DATA, RECIPE, overrides, subprocess_env, train_rows

DEADLINE_S = 600


def train(out: Path, *extra: str, steps: int) -> subprocess.CompletedProcess[str]:
    return _launch.run(
        [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            RECIPE,
            *overrides(out, *extra, steps=steps),
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def test_resume_names_changed_settings_and_a_refused_one_keeps_the_record(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    first = train(out, steps=2)
    assert first.returncode == 0, first.stderr[-3000:]
    config = out / "config.yaml"
    recorded = config.read_text()
    assert "lr: 0.003" in recorded

    # Other prompt data: refused (the data order could not continue), nothing rewritten.
    more = tmp_path / "more.jsonl"
    rows = Path(DATA).read_text().splitlines()
    more.write_text("\n".join([*rows, rows[0]]) + "\n")
    refused = train(out, f"data.data_files=[{more}]", steps=3)
    assert refused.returncode != 0
    assert "the prompt data changed since the checkpoint" in refused.stderr
    assert config.read_text() == recorded

    # Another model (wider, and a new init): refused before anything starts, one line
    # naming the settings (the checkpoint holds the 64-wide model).
    wider = train(out, "model.tiny.hidden_size=128", "model.tiny.init_std=0.05", steps=3)
    assert wider.returncode == 2
    (line,) = [x for x in wider.stderr.splitlines() if x.startswith("error:")]
    assert f"resume.mode: auto would continue {out}, a run of another model (" in line
    assert (
        "model.tiny.hidden_size: 64 -> 128" in line and "model.tiny.init_std: 0.02 -> 0.05" in line
    )
    # output_dir given outright: a new experiment_name would not move it, so not that
    assert "start a new run with another output_dir (this recipe sets it outright" in line
    assert config.read_text() == recorded

    # Another learning rate and more steps: accepted, named, recorded.
    second = train(out, "trainer.lr=0.001", steps=3)
    assert second.returncode == 0, second.stderr[-3000:]
    (said,) = [line for line in second.stderr.splitlines() if "changed setting" in line]
    assert said.startswith("nexrl: resumed with ")
    assert "trainer.lr: 0.003 -> 0.001" in said
    assert "trainer.total_train_steps: 2 -> 3" in said
    assert "lr: 0.001" in config.read_text()
    assert [r["step"] for r in train_rows(out)] == [1, 2, 3]

    # The pool deleted (to free space, say): one line naming what to put back.
    recorded = config.read_text()
    shutil.rmtree(out / "pool.zarr")
    gone = train(out, steps=4)
    assert gone.returncode == 1
    assert "Traceback" not in gone.stderr
    (line,) = [x for x in gone.stderr.splitlines() if x.startswith("error:")]
    assert "checkpoint " in line and f"cannot resume the trajectory pool {out}/pool.zarr" in line
    assert "trajectory_pool.store" in line
    assert config.read_text() == recorded
    assert [r["step"] for r in train_rows(out)] == [1, 2, 3]
