"""``service.inference_service.command``: nexrl starts the user's inference server (as
a user names ``vllm serve ...``), reloads it through the backend's API each step and
stops it at the end. vLLM cannot run here: the stand-in is our embedded server with
``--api vllm`` (no policy version in its replies, the vLLM adapter's reload routes),
started by the command exactly as vLLM would be."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil

from nexrl.controller import Controller
from nexrl.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows

VLLM_STANDIN = (
    f"{sys.executable} -m backends.inference.embedded --model {{model}} --host {{host}} "
    "--port {port} --served-model-name {served_model_name} --api vllm --torch-threads 1"
)


def test_a_run_starts_reloads_and_stops_the_server_its_command_names(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "service.inference_service.backend=vllm",
            f"service.inference_service.command='{VLLM_STANDIN}'",
            steps=3,
        ),
    )
    assert Controller(recipe, progress=False).run().steps == 3

    log = (out / "logs" / "driver.log").read_text()
    started = re.search(
        r"server started by service.inference_service.command at \S+ \(pid (\d+)\)", log
    )
    assert started, log[-2000:]
    # The command ran as written: the stand-in's own log is the run's inference log.
    assert (out / "logs" / "inference.log").stat().st_size > 0
    # Each step's rollouts came from the weights the previous step published (sync):
    # the versions are the controller's record of its reloads through the vLLM API.
    for r in train_rows(out):
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/inference"] == r["step"]
    # Stopped with the run.
    assert not psutil.pid_exists(int(started.group(1))) or (
        psutil.Process(int(started.group(1))).status() == psutil.STATUS_ZOMBIE
    )
