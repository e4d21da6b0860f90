"""The test Slurm (build-support/slurm.sh): fail with how to start it when it is down."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

START = "sudo build-support/slurm.sh start"

# A run on the one-node test Slurm: every job small enough that a run's jobs fit
# beside the tests' own (the node offers ~80% of the machine's memory).
SLURM_TOKEN = "slurm-test-token"
SLURM_RUN = [
    "cluster.type=slurm",
    "cluster.slurm.partition=debug",
    "cluster.slurm.scheduler_host=127.0.0.1",
    "cluster.slurm.walltime=00:30:00",
    "cluster.slurm.rollout.jobs=2",
    "cluster.slurm.rollout.memory=2GB",
    "cluster.slurm.trainer.cores=1",
    "cluster.slurm.trainer.memory=3GB",
    "cluster.slurm.inference.cores=1",
    "cluster.slurm.inference.memory=2GB",
    "cluster.slurm.inference.gpus=0",
    # the inference server binds its node's address: beyond loopback, a token
    f"service.inference_service.api_key={SLURM_TOKEN}",
]


def require_slurm() -> None:
    """Tests that need Slurm fail (not skip) without it: CI starts it first."""
    if shutil.which("sinfo") is None:
        pytest.fail(f"Slurm is not installed: run '{START}' (installs and starts a one-node Slurm)")
    out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.fail(f"the test Slurm is not running: run '{START}' ({out.stderr.strip()})")


def squeue(job_ids: list[str]) -> dict[str, str]:
    """{job id: state} of the given jobs that squeue still lists as pending/running."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
        check=False,
    )
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def wait_gone(job_ids: list[str], timeout_s: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    left = squeue(job_ids)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = {k: v for k, v in squeue(job_ids).items() if v not in ("COMPLETING",)}
    return left
