"""The train entry point: loads a recipe, applies overrides, reports mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.driver.cli.train import main

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"


def test_prints_resolved_recipe_with_inherited_base(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RECIPE, "--print-config"]) == 0
    out = capsys.readouterr().out
    # experiment_name comes from the recipe, output_dir from the shipped base,
    # resolved through the interpolation.
    assert "experiment_name: max_digit_tiny" in out
    assert "output_dir: runs/max_digit_tiny" in out


def test_override_on_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RECIPE, "experiment_name=other", "--print-config"]) == 0
    assert "output_dir: runs/other" in capsys.readouterr().out


def test_flags_go_anywhere_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RECIPE, "--print-config", "experiment_name=other", "seed=7"]) == 0
    out = capsys.readouterr().out
    assert "output_dir: runs/other" in out and "seed: 7" in out
    assert main(["--check", RECIPE, "experiment_name=other"]) == 0


def test_missing_recipe_is_a_clear_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes/nope/missing.yaml"]) == 2
    err = capsys.readouterr().err
    assert "recipes/nope/missing.yaml" in err
    assert "not found" in err
    assert "Traceback" not in err


def test_ctrl_c_while_the_recipe_is_checked_is_one_line_and_exit_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a plugin file is imported while the recipe is checked: Ctrl-C arriving there
    plugin = tmp_path / "slow_plugin.py"
    plugin.write_text("raise KeyboardInterrupt\n")
    assert main([RECIPE, "--check", f"plugins=[{plugin}]"]) == 130
    err = capsys.readouterr().err.strip()
    assert err == "nexrl: stopped by Ctrl-C before the run started; nothing was written"


def test_malformed_override_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RECIPE, "seed=="]) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "Traceback" not in err


def test_any_schema_field_can_be_overridden_without_plus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # cluster.dashboard_address is not written in the recipe file, only in the schema.
    assert main([RECIPE, "cluster.dashboard_address=127.0.0.1:0", "--print-config"]) == 0
    assert "dashboard_address: 127.0.0.1:0" in capsys.readouterr().out


def test_misspelled_override_is_reported_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([RECIPE, "trainer.learning_rate=1e-3", "--check"]) == 2
    err = capsys.readouterr().err
    assert "trainer.learning_rate" in err and "lr" in err and "Traceback" not in err


def test_fresh_run_never_overwrites_an_existing_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    assert main([RECIPE, f"output_dir={out}", "resume.mode=disable"]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "resume.mode=auto" in err
    assert "Traceback" not in err
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_trainer_world_size_the_cluster_cannot_place_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The local cluster has 2 workers offering GPU units; 3 data-parallel ranks cannot
    # be placed. TrainerGroupError (a NexrlError) must be one line, not a traceback.
    code = main(
        [
            RECIPE,
            f"output_dir={tmp_path / 'run'}",
            "cluster.n_workers=2",
            "cluster.dashboard_address=127.0.0.1:0",
            "trainer.world_size=3",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # (progress bars of the tiny model's build may come first; the error is one line, last)
    lines = [line for line in err.split("\n") if "\r" not in line and line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:], lines
    assert errors[0].startswith("error: trainer.world_size=3 needs 3 Dask workers")
    assert "lower trainer.world_size" in errors[0]


def test_one_line_joins_a_message_that_spans_lines() -> None:
    from nexrl.core.pool import PoolStoreError
    from nexrl.driver.cli.train import one_line

    assert one_line(PoolStoreError("pool.zarr: not a pool\n  fix: point at a pool")) == (
        "pool.zarr: not a pool | fix: point at a pool"
    )
    assert one_line(PoolStoreError()) == "PoolStoreError"


def test_shortening_a_decaying_schedule_warns_once_with_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """max_digit_tiny: 300 steps of cosine. total_train_steps=20 also ends the schedule
    at 20: one warning line naming the recipe's 300 and the key that keeps it."""
    assert main([RECIPE, "trainer.total_train_steps=20", "--check"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert err == [
        f"warning: {RECIPE}: trainer.total_train_steps=20 also ends the cosine LR schedule at "
        "step 20 instead of the recipe's step 300; to stop early on the recipe's schedule add "
        "trainer.lr_schedule_steps=300"
    ]
    for quiet in (
        ["trainer.total_train_steps=20", "trainer.lr_schedule_steps=300"],  # the fix
        ["trainer.total_train_steps=20", "trainer.lr_scheduler=constant"],  # no end to move
        ["trainer.total_train_steps=300"],  # the recipe's own value
    ):
        assert main([RECIPE, *quiet, "--check"]) == 0
        assert "warning" not in capsys.readouterr().err


def test_the_entry_module_imports_nothing_heavy() -> None:
    # A LocalCluster's worker processes are spawned, and a spawned process imports the
    # parent's main module again (`python -m nexrl.driver.cli.train`): torch or the recipe
    # machinery here cost every worker ~5 s of start-up on 2 cores.
    import os
    import subprocess
    import sys

    probe = (
        "import sys, nexrl.driver.cli.train; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'transformers', 'numpy', 'hydra', 'distributed'}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_scaffolds_recipe_says_its_comment_describes_the_example_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scaffold's recipe describes the example task it wrote, and says to describe
    one's own task there: after make_data.py and evaluator.py change, a comment naming
    the next-digit task as the recipe's task would describe another task."""
    assert main(["--new-task", str(tmp_path / "arith")]) == 0
    header = (tmp_path / "arith" / "arith.yaml").read_text().split("defaults:")[0]
    assert header.startswith("# arith: as scaffolded, the example task of make_data.py and ")
    assert "say what your task is here" in header
