"""The recipe check rejects unknown or unusable logger.backends before a run starts."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


def test_misspelt_sink_names_the_field_and_the_fix() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(DEFAULT, ["logger.backends=[jsonl,tensorbord]"])
    text = info.value.render()
    assert len(info.value.problems) == 1
    assert "logger.backends" in text
    assert "'tensorbord'" in text
    assert "did you mean 'tensorboard'?" in text
    assert "valid: console, jsonl, mlflow, tensorboard, wandb" in text


def test_known_sinks_pass() -> None:
    recipe = load_recipe_checked(DEFAULT, ["logger.backends=[console,jsonl,tensorboard]"])
    assert list(recipe.cfg.logger.backends) == ["console", "jsonl", "tensorboard"]


def test_sink_whose_package_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # mlflow is in the lock: hide it as an environment without it would (a None entry in
    # sys.modules is what find_spec and import both read as "not installed")
    for name in [m for m in list(sys.modules) if m.startswith("mlflow.")] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)  # its submodules too, if imported
    assert importlib.util.find_spec("mlflow") is None
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(DEFAULT, ["logger.backends=[console,mlflow]"])
    assert info.value.problems == [
        "logger.backends: 'mlflow' needs mlflow, which is not installed: "
        "pip install mlflow, or remove 'mlflow' from logger.backends"
    ]
