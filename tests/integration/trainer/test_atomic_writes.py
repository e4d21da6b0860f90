"""Snapshot and checkpoint writes that die half-way never leave a bad ``latest``.

Writers run in subprocesses that are SIGKILLed at random points inside a
publish/save, or hit a real failing write (a file-size limit: EFBIG, as a full
disk would fail). Afterwards ``latest`` must name a complete, loadable version.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from backends.inference.embedded.weights import check_snapshot_files
from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import (
    SnapshotPublisher,
    latest_snapshot,
    list_snapshots,
    read_version,
)
from tests.integration.trainer._writers import FileEngine, big_model, versioned_state

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.trainer._writers", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
    )


def kill_during(proc: subprocess.Popen, target: int, rng: random.Random, max_delay: float) -> str:
    """SIGKILL ``proc`` a random moment after it printed ``start {target}``; its output."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(f"start {target}"):
            break
    time.sleep(rng.uniform(0.0, max_delay))
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return "".join(seen) + rest


def done_versions(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("done ")]


def test_snapshot_writer_killed_mid_publish(tmp_path: Path) -> None:
    root = tmp_path / "snaps"
    base = big_model().state_dict()["lm_head.weight"]
    rng = random.Random(0)
    killed_inside = 0
    for _ in range(3):
        target = rng.randint(2, 3)
        out = kill_during(spawn("snapshot-loop", str(root)), target, rng, max_delay=0.3)
        killed_inside += f"done {target}" not in out
        latest = latest_snapshot(root)
        assert latest is not None
        version, path = latest
        assert version >= max(done_versions(out))  # never behind a finished publish
        assert os.path.realpath(root / "latest") == str(path.resolve())
        check_snapshot_files(root / "latest")  # the inference server's own check
        model = AutoModelForCausalLM.from_pretrained(root / "latest", dtype=torch.float32)
        assert torch.equal(model.state_dict()["lm_head.weight"], base + version)  # no mixture
        for v, p in list_snapshots(root):
            assert read_version(p) == v
        for entry in root.iterdir():  # only complete snapshots, the pointer, or temp names
            assert entry.name == "latest" or entry.name.startswith(".") or read_version(entry)
    assert killed_inside >= 1
    SnapshotPublisher(root)  # a new writer removes the debris
    assert not [e for e in root.iterdir() if e.name.startswith(".")]


def test_snapshot_write_failing_with_efbig_keeps_the_previous_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "snaps"
    model = big_model()
    SnapshotPublisher(root).publish(versioned_state(model, 1), model.config, 1)
    limit = 4 * 1024 * 1024  # the ~27 MB weights file cannot be written
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.trainer._writers",
            "snapshot-efbig",
            str(root),
            str(limit),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.stdout.startswith("failed"), proc.stdout + proc.stderr
    assert latest_snapshot(root) == (1, root / "v1")
    assert sorted(e.name for e in root.iterdir()) == ["latest", "v1"]  # the failed one cleaned up
    loaded = AutoModelForCausalLM.from_pretrained(root / "latest", dtype=torch.float32)
    assert torch.equal(
        loaded.state_dict()["lm_head.weight"], model.state_dict()["lm_head.weight"] + 1
    )


def test_checkpoint_writer_killed_mid_save(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    rng = random.Random(1)
    killed_inside = 0
    for _ in range(3):
        target = rng.randint(2, 3)
        out = kill_during(spawn("checkpoint-loop", str(root)), target, rng, max_delay=0.2)
        killed_inside += f"done {target}" not in out
        mgr = CheckpointManager(root)
        latest = mgr.latest()
        assert latest is not None
        step = int(latest.name.split("_")[1])
        assert step >= max(done_versions(out))
        assert (root / "latest").read_text().strip() == latest.name
        engine = FileEngine()
        state = mgr.load(engine, latest)
        assert state["global_step"] == step and bool((engine.payload == step).all())
    assert killed_inside >= 1
