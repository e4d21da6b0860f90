"""``trainer.mode: training-service`` in a recipe: its mistakes are caught at load, before
any cluster starts, one line each naming the field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


def test_the_default_is_self_hosted_and_the_service_mode_loads() -> None:
    assert load_recipe_checked(DEFAULT).cfg.trainer.mode == "self-hosted"
    recipe = load_recipe_checked(
        DEFAULT, ["trainer.mode=training-service", "trainer.service_url=http://10.0.0.5:8300"]
    )
    assert (recipe.cfg.trainer.mode, recipe.cfg.trainer.service_url) == (
        "training-service",
        "http://10.0.0.5:8300",
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.mode=training_service"], "trainer.mode: 'training_service' is not one of"),
        (
            ["trainer.mode=training-service", "trainer.world_size=2"],
            "trainer.world_size: the training service runs one trainer rank, got 2",
        ),
        (
            ["trainer.mode=training-service", "trainer.service_url=10.0.0.5:8300"],
            "trainer.service_url: '10.0.0.5:8300' is not an http(s):// URL",
        ),
        (
            ["trainer.service_url=http://10.0.0.5:8300"],
            "trainer.service_url: set but trainer.mode is 'self-hosted'",
        ),
    ],
)
def test_mistakes_name_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(DEFAULT, overrides)
    assert message in str(info.value)


def test_the_client_imports_without_torch_or_a_web_framework() -> None:
    code = (
        "import sys, nexrl.trainer.service as s; s.TrainingClient; "
        "bad = {'torch', 'fastapi', 'uvicorn', 'deepspeed'} & set(sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
