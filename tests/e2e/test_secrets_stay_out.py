"""A secret the recipe takes from the environment (``${oc.env:VAR}``: an inference API
key, a judge's key) never lands in the run folder: not in config.yaml, the logs, the
metrics, the pool or the checkpoints. The run folder is what people share."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides


def test_a_secret_from_the_environment_is_nowhere_in_the_run_folder(tmp_path: Path) -> None:
    secret = f"sk-test-{secrets.token_hex(16)}"
    os.environ["NEXRL_TEST_API_KEY"] = secret
    try:
        out = tmp_path / "run"
        recipe = load_recipe_checked(
            RECIPE,
            overrides(
                out,
                "service.inference_service.api_key=${oc.env:NEXRL_TEST_API_KEY}",
                "trainer.save_every=1",  # checkpoints (with the controller's state) too
                steps=2,
            ),
        )
        assert recipe.cfg.service.inference_service.api_key == secret  # the run used it
        assert Controller(recipe, progress=False).run().steps == 2
    finally:
        del os.environ["NEXRL_TEST_API_KEY"]

    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 20  # config, logs, metrics, pool chunks, checkpoints, snapshots
    leaked = [str(p.relative_to(out)) for p in files if secret.encode() in p.read_bytes()]
    assert leaked == []
    # config.yaml says where the key comes from, and still loads as a recipe's config
    recorded = OmegaConf.load(out / "config.yaml")
    raw: Any = OmegaConf.to_container(recorded, resolve=False)
    assert raw["service"]["inference_service"]["api_key"] == "${oc.env:NEXRL_TEST_API_KEY}"
    assert recorded.trainer.total_train_steps == 2
