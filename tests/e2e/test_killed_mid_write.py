"""End-to-end: ``kill -9`` in the middle of a checkpoint write, a snapshot publish or a
pool commit of a real run of the default recipe. The half-written thing is never read:
the checkpoint pick, the snapshot lookup and the inference server's check, and the
pool's reader all see the last complete one; the same command resumes from it and
trains no group twice and loses none; the debris of the killed write is removed or ignored and
does not pile up.

The kill is exact: ``tests/e2e/_killpoint/sitecustomize.py`` (first on the run's
``PYTHONPATH``) makes the process that reaches the chosen call (the N-th ``os.rename``
of a checkpoint's temporary folder, the ``torch.save`` of one of its files, the
``open`` of a file of a snapshot, the ``os.link`` of a pool commit marker, the driver's
write of a metrics row, ...) SIGKILL itself right before it. The code
that writes is the product's, unchanged, in the run's own processes: the driver, the trainer
actor's Dask worker (checkpoints, snapshots) or a rollout worker (the pool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from transformers import AutoModelForCausalLM

from backends.inference.embedded.weights import check_snapshot_files
from nexrl.core.pool.commits import CommitLog
from nexrl.core.pool.kv import LocalKV
from nexrl.core.weights.checkpoint import CheckpointManager, verify_checkpoint
from nexrl.core.weights.snapshot import latest_snapshot, list_snapshots, verify_snapshot
from tests.e2e._groups import group_record
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows
from tests.e2e.test_kill_and_resume import DEADLINE_S, expected_group_ids
from tests.e2e.test_train_run import processes_using

KILLPOINT = Path(__file__).resolve().parent / "_killpoint"
STEPS = 4  # checkpoints at steps 2 and 4; snapshots v1..v4

# case: (call, path pattern, N-th matching call in its process, what dies)
CASES = {
    # checkpoint step_4 (the second): step_2 is the last complete one
    "checkpoint: engine and RNG files written, no trainer state": (
        "torch.save", "/checkpoints/.tmp-step_4/trainer_state.pt", 1, "trainer"),
    "checkpoint: every file written, no meta.json": (
        "replace", "/checkpoints/.tmp-step_4/meta.json", 1, "trainer"),
    "checkpoint: complete, not yet renamed": (
        "rename", "/checkpoints/.tmp-step_4", 1, "trainer"),
    "checkpoint: renamed, 'latest' not yet moved": (
        "replace", "/checkpoints/latest", 2, "trainer"),
    # snapshot v3 (published by step 3, after checkpoint step_2)
    "snapshot: weights written, no config.json or version": (
        "open", "/snapshots/.tmp-v3-*/config.json", 1, "trainer"),
    "snapshot: complete, not yet renamed": ("rename", "/snapshots/.tmp-v3-*", 1, "trainer"),
    "snapshot: renamed, 'latest' not yet moved": ("replace", "/snapshots/latest", 3, "trainer"),
    # the driver, after checkpoint step_2 is complete, before step 2's metrics row is
    # written: the resume logs the row the checkpoint carries
    "driver: checkpoint complete, its step's metrics row not written": (
        "jsonl", "/metrics.jsonl#step=2", 1, "driver"),
    # the first block a rollout worker appends
    "pool: a chunk of a block written, no commit marker": (
        "replace", "/pool.zarr/segments/*/c/*", 2, "rollout"),
    "pool: every chunk written, no commit marker": ("link", "/pool.zarr/_commits/*", 1, "rollout"),
}  # fmt: skip

# CI runs one kill point per kind of write (CI's 60-minute budget; two runs per trainer
# case): a checkpoint complete under its name with 'latest' not yet moved (the resume
# writes step_4 again over it), a snapshot the same way, the driver's row, an unmarked
# pool chunk. The states inside a temporary folder (files missing) are read back after
# random SIGKILLs in tests/integration/trainer/test_atomic_writes.py; NEXRL_BENCH_LONG=1
# runs every case here too.
IN_CI = [
    "checkpoint: renamed, 'latest' not yet moved",
    "snapshot: renamed, 'latest' not yet moved",
    "driver: checkpoint complete, its step's metrics row not written",
    "pool: a chunk of a block written, no commit marker",
]
RUN = list(CASES) if os.environ.get("NEXRL_BENCH_LONG") == "1" else IN_CI


def _run(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE]
    return subprocess.run(
        [*args, *overrides(out, "trainer.save_every=2", steps=STEPS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def _debris(folder: Path) -> list[str]:
    """Entries an interrupted write leaves: temporary folders/files and trash."""
    return sorted(e.name for e in folder.iterdir() if e.name.startswith("."))


@pytest.mark.parametrize("case", RUN)
def test_killed_mid_write_resumes_from_the_last_complete_one(tmp_path: Path, case: str) -> None:
    call, needle, nth, victim = CASES[case]
    out, fired = tmp_path / "run", tmp_path / "fired"
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(KILLPOINT), env["PYTHONPATH"]])
    env["NEXRL_KILLPOINT"] = "|".join(
        [call, needle, str(nth), str(fired), "deepspeed" if victim == "rollout" else ""]
    )
    first = _run(out, env)
    assert fired.exists(), f"the kill point was never reached: {first.stderr[-3000:]}"
    killed_pid = int(fired.read_text().split()[0])
    ck, snaps = CheckpointManager(out / "checkpoints"), out / "snapshots"

    if victim == "trainer":
        # The run stops naming the trainer and how to resume.
        assert first.returncode == 1, first.stderr[-3000:]
        assert "the trainer failed" in first.stderr and "run the same command again" in (
            first.stderr
        ), first.stderr[-3000:]
        # The readers, on the state the kill left: resume's pick...
        assert ck.latest_verified() == out / "checkpoints" / "step_2"
        for _, path in ck.complete():
            assert verify_checkpoint(path) is None
        state = torch.load(out / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
        assert state["global_step"] == 2
        # ... and the snapshot lookup of the trainer and the inference server's check.
        found = latest_snapshot(snaps)
        assert found is not None
        version, path = found
        assert version == (4 if case.startswith("checkpoint") else 2)
        assert verify_snapshot(path) is None
        check_snapshot_files(snaps / "latest")
        AutoModelForCausalLM.from_pretrained(snaps / "latest", dtype=torch.float32)
        for _, p in list_snapshots(snaps):  # every snapshot a reader may list is whole
            assert verify_snapshot(p) is None
        assert _debris(out / "checkpoints") or _debris(snaps), "the kill left no trace"

        # The same command resumes from step 2 and finishes.
        second = _run(out, subprocess_env())
        assert second.returncode == 0, second.stderr[-3000:]
        driver_log = (out / "logs" / "driver.log").read_text()
        assert "resumed from" in driver_log and "at step 2" in driver_log
        # ... and the terminal says so, not only the log
        resumed = f"nexrl: resumed at step 2 from {out / 'checkpoints' / 'step_2'}"
        assert resumed in second.stderr, second.stderr[-3000:]
    elif victim == "driver":
        assert first.returncode == -9, first.stderr[-3000:]  # the driver itself, SIGKILL
        # its workers and inference server notice and exit by themselves
        _, alive = psutil.wait_procs(processes_using(out), timeout=60)
        assert alive == []
        assert ck.latest_verified() == out / "checkpoints" / "step_2"
        assert [r["step"] for r in train_rows(out)] == [1]  # row 2 was never written
        second = _run(out, subprocess_env())
        assert second.returncode == 0, second.stderr[-3000:]
        driver_log = (out / "logs" / "driver.log").read_text()
        assert "resumed from" in driver_log and "at step 2" in driver_log
        assert "no row for step 2: logged from its checkpoint" in driver_log
    else:
        # A rollout worker died mid-append: its block was never committed; the run went
        # on (the block's groups rolled out again elsewhere) and finished.
        assert first.returncode == 0, first.stderr[-3000:]
        kv = LocalKV(out / "pool.zarr")
        dead = [
            seg.name
            for seg in (out / "pool.zarr" / "segments").iterdir()
            if seg.is_dir()
            and json.loads((seg / "zarr.json").read_text())["attributes"]["nexrl_segment"]["pid"]
            == killed_pid
        ]
        assert len(dead) == 1, dead
        assert CommitLog(kv).read(dead[0], 0) is None  # its half-written block: no marker
        written = [p for p in (out / "pool.zarr" / "segments" / dead[0]).rglob("*") if p.is_file()]
        assert len(written) > 1  # ... but chunks of it are on disk, never read

    # Every step once; no group of the data order lost, none trained twice. (A rollout
    # future that Dask ran again after its worker died commits a second copy of its
    # group: it is delivered, and dropped, never trained.)
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    groups = group_record(out, STEPS)
    assert groups["lost"] == [] and groups["duplicated"] == 0, groups
    assert groups["trained"] <= expected_group_ids(out, STEPS * 4 + 8)
    assert ck.latest_verified() == out / "checkpoints" / f"step_{STEPS}"
    assert latest_snapshot(snaps) == (STEPS, snaps / f"v{STEPS}")
    # the killed write's debris was removed by the next write (old snapshots pruned in
    # the background may still be on their way out as .trash-*)
    assert _debris(out / "checkpoints") == []
    assert [n for n in _debris(snaps) if not n.startswith(".trash-")] == []
    assert processes_using(out) == []
