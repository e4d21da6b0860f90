"""Policy-version tags with ``base_urls`` engines that do not report a version (vLLM,
SGLang): a controller run against an inference server started separately, as a user
starts vLLM. vLLM cannot run here, so the stand-in is our embedded server started
with ``--api vllm``: its replies carry no policy version (as vLLM's) and it reloads
through the routes ``VLLMReloadAdapter`` drives (``/collective_rpc``). The version
tags come from the controller's record of what it loaded, and must advance with
the trainer (before the fix every trajectory was tagged 0)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.driver.controller import Controller
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.e2e.test_train_run import pool_of


@pytest.fixture(scope="module")
def vllm_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``(base_url, model_dir)``: the default recipe's initial model served by the stand-in."""
    root = tmp_path_factory.mktemp("external")
    cfg = load_recipe_checked(RECIPE, [f"output_dir={root}"]).cfg
    model_dir, _ = prepare_model(cfg, root)
    server = EmbeddedServer(
        model_dir,
        served_model_name="policy",
        extra_args=["--api", "vllm", "--torch-threads", "1", "--log-level", "warning"],
    )
    with server:
        yield server.base_url, model_dir


def test_standin_reports_no_version(vllm_standin: tuple[str, Path]) -> None:
    url, _ = vllm_standin
    reply = httpx.post(
        f"{url}/v1/completions",
        json={"model": "policy", "prompt": "max 1 2 3", "max_tokens": 1, "logprobs": 0},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert "policy_version" not in reply.json() and "x-policy-version" not in reply.headers


@pytest.mark.parametrize("mode", ["sync", "batch-async"])
def test_version_tags_advance_with_the_trainer(
    vllm_standin: tuple[str, Path], tmp_path: Path, mode: str
) -> None:
    url, model_dir = vllm_standin
    out = tmp_path / "run"
    steps = 4
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"model.path={model_dir}",
            "service.inference_service.backend=vllm",
            f"service.inference_service.base_urls=[{url}]",
            f"weight.sync_mode={mode}",
            "weight.staleness_threshold=1",
            steps=steps,
        ),
    )
    result = Controller(recipe, progress=False).run()
    assert result.steps == steps
    train = train_rows(out)
    assert [r["version/inference"] for r in train] == [1, 2, 3, 4]
    if mode == "sync":
        # nothing runs during a reload: step k trains on rollouts of v(k-1) exactly
        assert [(r["version/rollout_min"], r["version/rollout_max"]) for r in train] == [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 3),
        ]
    else:
        # rollouts run ahead by at most one version, and the tags follow the reloads
        for r in train:
            assert r["step"] - 2 <= r["version/rollout_min"] <= r["version/rollout_max"]
            assert r["version/rollout_max"] <= r["step"] - 1
            assert r["version/lag_max"] <= 1
        assert train[-1]["version/rollout_max"] >= 2
    ds = pool_of(out).to_xarray()
    delivered = ds["policy_version"].values[ds["status"].values == 1]
    assert len(delivered) == steps * 32
    # not all tagged 0 (with every tag 0 the batch-async staleness filter, max 1
    # version, would drop every group from step 3 on and the run could not finish)
    assert sorted(set(delivered.tolist()))[-1] >= 2
