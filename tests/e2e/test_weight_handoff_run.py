"""End-to-end: the default recipe with ``weight.handoff: memory`` (CPU: the ``shm``
channel): every step's weights reach the server from memory, the rollouts of the
next step are sampled by them, and the run folder ends with a complete snapshot of
the last version that ``from_pretrained`` loads (written behind each step)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from nexrl.core.weights.snapshot import latest_snapshot, list_snapshots, verify_snapshot
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from nexrl.inference.supervisor import InferenceSupervisor
from tests.e2e._recipe import RECIPE, overrides, train_rows


def test_memory_handoff_run_trains_and_keeps_a_loadable_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    # The buffers this run handed over (other tests' runs on the machine have their own):
    # the real reload, with each descriptor's path noted on its way.
    buffers: set[str] = set()
    reload = InferenceSupervisor.reload_from_channel

    def noting(
        self: InferenceSupervisor, descriptor: dict[str, Any], version: int, path: str
    ) -> float:
        buffers.add(str(descriptor["path"]))
        return reload(self, descriptor, version, path)

    monkeypatch.setattr(InferenceSupervisor, "reload_from_channel", noting)
    recipe = load_recipe_checked(RECIPE, overrides(out, "weight.handoff=memory", steps=3))
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (3, None)

    train = train_rows(out)
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:
        assert r["weight/handoff_memory"] == 1.0  # no fallback to files
        assert r["version/trainer"] == r["version/inference"] == r["step"]
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["timing/trainer_weight_handoff"] > 0 and r["timing/reload"] > 0
    assert all("timing/trainer_snapshot_background" in r for r in train[1:])

    snap = latest_snapshot(out / "snapshots")
    assert snap is not None and snap[0] == 3
    assert [v for v, _ in list_snapshots(out / "snapshots")] == [1, 2, 3]
    assert verify_snapshot(snap[1]) is None
    model = AutoModelForCausalLM.from_pretrained(snap[1], local_files_only=True)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert len(buffers) == 1  # one channel, written in place at every step
    assert not [b for b in buffers if Path(b).exists()]  # this run's buffer is gone


def test_a_killed_server_restarts_on_the_snapshot_written_behind(tmp_path: Path) -> None:
    """The restart path with the handoff in memory: the new server starts on the last
    handed-over version (its snapshot, waited for if still being written) and later
    steps hand over in memory again (the descriptor sent in full to the new server)."""
    import signal

    from tests.e2e.test_inference_server_killed import STEPS, run_with_signal_to_the_server

    out = tmp_path / "run"
    _, rows, _ = run_with_signal_to_the_server(out, signal.SIGKILL, "weight.handoff=memory")
    log = (out / "logs" / "driver.log").read_text()
    seen = [
        {k: r.get(k) for k in ("step", "version/rollout_min", "version/rollout_max",
                               "version/inference", "weight/handoff_memory")}
        for r in rows
    ]  # fmt: skip
    why = f"{seen}\n{log[-3000:]}"  # (CI shows a failure's message: say what was seen)
    for r in rows:  # (a group retried after the kill may run across a sync: one behind)
        assert r["step"] - 2 <= r["version/rollout_min"] <= r["version/rollout_max"] < r["step"], (
            why
        )
        assert r["version/inference"] == r["step"], why
    assert rows[-1]["weight/handoff_memory"] == 1.0, why
    # killed once step 2 is logged: the new server starts on the newest version handed
    # over by then, from its snapshot (waited for if still being written) or the one
    # before ("restarting on v<N-1>" follows); steps 3-6 take ~0.1 s each here, so the
    # kill may land after any handover (noticed at step 6's reload: "starting one on v6")
    restarts = [ln for ln in log.splitlines() if "inference: " in ln and " on v" in ln]
    started = re.findall(r"(?:restarting on|starting one on) v(\d+)", "\n".join(restarts))
    assert started and all(1 <= int(v) <= STEPS for v in started), f"{restarts}\n{why}"
    assert latest_snapshot(out / "snapshots") == (STEPS, out / "snapshots" / f"v{STEPS}")
