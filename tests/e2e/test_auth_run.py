"""A whole run of the default recipe with the inference server's token on: the token
comes from the environment (``${oc.env:...}``), the server nexrl starts requires it,
and every caller (rollouts, validation, the supervisor's health checks and weight
reloads) sends it: the run trains, validates and reloads with no server restart."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, read_rows, train_rows


def test_a_run_with_the_token_on(tmp_path: Path) -> None:
    token = f"tok-{secrets.token_hex(8)}"
    os.environ["NEXRL_TEST_TOKEN"] = token
    try:
        out = tmp_path / "run"
        recipe = load_recipe_checked(
            RECIPE,
            overrides(
                out,
                "service.inference_service.api_key=${oc.env:NEXRL_TEST_TOKEN}",
                "validate.validate_before_train=true",
                "validate.every=2",
                steps=2,
            ),
        )
        assert recipe.cfg.service.inference_service.api_key == token
        assert Controller(recipe, progress=False).run().steps == 2
    finally:
        del os.environ["NEXRL_TEST_TOKEN"]

    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["inference/restarts"] == 0 for r in rows)  # health checks answered
    assert all(r["rollout/failed_groups"] == 0 for r in rows)
    val = [r for r in read_rows(out) if "val/reward/mean" in r]
    assert len(val) == 2 and all(r["val/num_samples"] > 0 for r in val)
    assert (out / "snapshots" / "v2").is_dir()  # reloaded v1 and v2 (no restart)
