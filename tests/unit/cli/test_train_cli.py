"""The train entry point: loads a recipe, applies overrides, reports mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.cli.train import main

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


def test_missing_recipe_is_a_clear_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["recipes/nope/missing.yaml"]) == 2
    err = capsys.readouterr().err
    assert "recipes/nope/missing.yaml" in err
    assert "not found" in err
    assert "Traceback" not in err


def test_malformed_override_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RECIPE, "seed=="]) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "Traceback" not in err


def test_any_schema_field_can_be_overridden_without_plus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # cluster.dashboard_address is not written in the recipe file, only in the schema.
    assert main([RECIPE, "cluster.dashboard_address=:0", "--print-config"]) == 0
    assert "dashboard_address: :0" in capsys.readouterr().out


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
