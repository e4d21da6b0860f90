"""``service.inference_service.command``: nexrl starts the user's inference server (as
a user names ``vllm serve ...``), reloads it through the backend's API each step and
stops it at the end. vLLM cannot run here: the stand-in is our embedded server with
``--api vllm`` (no policy version in its replies, the vLLM adapter's reload routes),
started by the command exactly as vLLM would be."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import psutil

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows

# A command runs in the driver's environment as it is (no nexrl import path added):
# the stand-in names its own, as a user's engine in another venv would not.
VLLM_STANDIN = (
    f"env PYTHONPATH={os.pathsep.join(p for p in sys.path if p)} "
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
    # One server for the whole run: it was not lost and restarted on the way.
    assert "restarting" not in log and "starting one on" not in log, log[-3000:]
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


LORA = (
    "trainer.lora.rank=8",
    "trainer.lora.alpha=16",
    "trainer.lora.target_modules=[q_proj,v_proj,gate_proj]",
)


def test_a_lora_run_on_vllm_loads_each_adapter_by_name_and_resumes(tmp_path: Path) -> None:
    """``trainer.lora`` with a vLLM server nexrl starts: the initial adapter and each
    step's adapter snapshot are loaded through vLLM's /v1/load_lora_adapter as
    'policy-lora', which the rollouts request (the stand-in answers 404 to the base
    name once an adapter is loaded, so a rollout asking for the base fails the run).
    A resumed run starts the command on the base model and loads the checkpoint's
    adapter before its first rollout."""
    out = tmp_path / "run"
    command = f"service.inference_service.command='{VLLM_STANDIN} --enable-lora --max-lora-rank 8'"

    def run(steps: int) -> int:
        extra = ("service.inference_service.backend=vllm", command, *LORA, "trainer.save_every=2")
        recipe = load_recipe_checked(RECIPE, overrides(out, *extra, steps=steps))
        return Controller(recipe, progress=False).run().steps

    assert run(2) == 2
    log = (out / "logs" / "driver.log").read_text()
    assert re.search(r"initial adapter \S+/v0 loaded as 'policy-lora'", log), log[-2000:]
    assert "restarting" not in log and "starting one on" not in log, log[-3000:]
    for r in train_rows(out):
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/inference"] == r["step"]
    for snap in (out / "snapshots").glob("v*"):
        names = {p.name for p in snap.iterdir()}
        assert "adapter_model.safetensors" in names and "config.json" not in names, names

    assert run(3) == 3
    log = (out / "logs" / "driver.log").read_text()
    assert "at step 2 (policy v2)" in log
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["version/rollout_min"] == rows[-1]["version/rollout_max"] == 2
    assert rows[-1]["version/inference"] == 3
