"""The train entry point: loads a recipe, applies overrides, reports mistakes."""

from __future__ import annotations

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
