"""Slurm jobs one at a time: what a role's job asks for (``job_kwargs``, the
prologue), submitting a script (``sbatch``), what squeue says of the jobs
(``job_states``), and the batch script that runs the driver itself
(``driver_script``). The run's jobs together: ``nexrl.driver.cluster.slurm``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexrl.core.config.sections.cluster import SlurmConfig, SlurmJobSize
from nexrl.core.errors import NexrlError
from nexrl.core.process.worker_env import job_environment
from nexrl.driver.cluster.roles import resources_arg, role_resources

__all__ = [
    "SlurmError",
    "SubmittedJob",
    "driver_script",
    "job_kwargs",
    "job_lines",
    "job_nodes",
    "job_states",
    "pending_reason",
    "sbatch",
]

DEATH_TIMEOUT_S = 120  # a job's worker exits this long after losing the driver's scheduler


class SlurmError(RuntimeError, NexrlError):
    """A Slurm job could not be submitted, or its worker never joined."""


def _prologue(cfg: SlurmConfig) -> list[str]:
    lines = list(cfg.prologue)
    if cfg.python is None:  # the driver's interpreter: give it the driver's imports
        path = os.pathsep.join(p for p in sys.path if p)
        lines.append(f"export PYTHONPATH='{path}'")
    lines.append(f"cd '{os.getcwd()}'")
    # the job's nanny leaves glibc's malloc tunables alone (nexrl.core.process.worker_env)
    lines += [f"export {k}='{v}'" for k, v in job_environment().items()]
    return lines


def job_kwargs(
    cfg: SlurmConfig,
    role: str,
    *,
    experiment: str,
    trainer_gpus: int = 1,
    log_dir: str | Path | None = None,
) -> dict[str, Any]:
    """``SLURMJob`` / ``SLURMCluster`` arguments of one role's jobs."""
    jobs: SlurmJobSize = getattr(cfg, role)
    directives = list(cfg.job_directives)
    if not any(d.strip().startswith(("--requeue", "--no-requeue")) for d in directives):
        # A job on a node Slurm takes for failed (down, or cut off the network for
        # SlurmdTimeout) is not requeued: the run replaces it itself, and a requeued copy
        # would queue ahead of the replacement, then join the scheduler as a stray
        # worker of the same name (measured: a partitioned inference node's job was
        # requeued and its replacement pended behind it).
        directives.append("--no-requeue")
    if jobs.gpus:
        directives.append(f"--gres=gpu:{jobs.gpus}")
    kwargs: dict[str, Any] = {
        "queue": cfg.partition,
        "account": cfg.account,
        "cores": jobs.cores,
        "processes": 1,
        "memory": jobs.memory,
        "walltime": cfg.walltime,
        "job_name": f"nexrl-{experiment}-{role}",
        "job_extra_directives": directives,
        "job_script_prologue": _prologue(cfg),
        "worker_extra_args": resources_arg(role_resources(role, jobs.cores, trainer_gpus)),
        "python": cfg.python or sys.executable,
        "death_timeout": DEATH_TIMEOUT_S,
    }
    if cfg.interface:  # and the scheduler's, unless scheduler_host places it (dask-jobqueue)
        kwargs["interface"] = cfg.interface
    if log_dir is not None:
        kwargs["log_directory"] = str(log_dir)
    return kwargs


@dataclass
class SubmittedJob:
    role: str
    name: str  # the job's name and its Dask worker's name
    job_id: str


def sbatch(script: str, name: str) -> str:
    """Submit ``script`` (job ``name``); its job id, or a ``SlurmError`` naming the job."""
    try:
        out = subprocess.run(
            ["sbatch", "--parsable"],
            input=script,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SlurmError(
            "cluster.type=slurm but 'sbatch' is not on PATH: run on a Slurm login node"
        ) from exc
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()
        raise SlurmError(
            f"sbatch refused job {name}: {msg[-1] if msg else out.returncode} "
            "(check cluster.slurm: partition, account, gpus, memory)"
        )
    return out.stdout.strip().split(";")[0]


STATES_EVERY_S = 5.0  # how often a wait for jobs reads their Slurm states
SAY_EVERY_S = 30.0  # how often it says what it is waiting for
# squeue reasons of a pending job that no wait clears: the request exceeds its partition
NEVER_STARTS = frozenset(
    {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints"}
)


def pending_reason(state: str | None) -> str:
    """``Resources`` of ``PENDING (Resources)``."""
    if not state or "(" not in state:
        return ""
    return state.split("(", 1)[1].rstrip(")")


def job_lines(jobs: Sequence[SubmittedJob], states: dict[str, str] | None = None) -> str:
    """``name (job id: STATE (reason))`` of each job, from squeue when not given."""
    if states is None:
        states = job_states([j.job_id for j in jobs])
    return ", ".join(
        f"{j.name} (job {j.job_id}: {states.get(j.job_id, 'not in squeue: ended')})" for j in jobs
    )


def job_states(job_ids: Sequence[str]) -> dict[str, str]:
    """``{job_id: 'STATE (reason)'}`` from squeue; jobs squeue no longer lists are absent."""
    if not job_ids:
        return {}
    out = subprocess.run(
        ["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T %r"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    states: dict[str, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            states[parts[0]] = parts[1] + (f" ({parts[2]})" if len(parts) > 2 else "")
    return states


def job_nodes(job_ids: Sequence[str]) -> dict[str, str]:
    """``{job_id: node}`` of the jobs that are running (from squeue)."""
    if not job_ids:
        return {}
    out = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-j", ",".join(job_ids), "-o", "%i %N"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return {
        parts[0]: parts[1]
        for parts in (ln.split() for ln in out.stdout.splitlines())
        if len(parts) == 2
    }


def driver_script(
    cfg: SlurmConfig,
    *,
    experiment: str,
    recipe: str,
    overrides: Sequence[str],
    log_dir: str | Path,
    cores: int = 2,
    memory: str = "8GB",
) -> str:
    """The batch script that runs the driver itself as a Slurm job (``--sbatch``):
    the same command, the same interpreter and imports, the recipe's partition,
    account, walltime, directives and prologue; its output in ``log_dir``."""
    import shlex

    mem_mb = _memory_mb(memory)
    lines = [
        "#!/usr/bin/env bash",
        f"#SBATCH -J nexrl-{experiment}-driver",
        f"#SBATCH -o {Path(log_dir) / 'driver-%j.out'}",
        f"#SBATCH --cpus-per-task={cores}",
        f"#SBATCH --mem={mem_mb}M",
        f"#SBATCH -t {cfg.walltime}",
    ]
    if cfg.partition:
        lines.append(f"#SBATCH -p {cfg.partition}")
    if cfg.account:
        lines.append(f"#SBATCH -A {cfg.account}")
    lines += [f"#SBATCH {d}" for d in cfg.job_directives]
    lines += _prologue(cfg)
    cmd = [sys.executable, "-m", "nexrl.driver.cli.train", recipe, *overrides]
    lines.append("exec " + " ".join(shlex.quote(c) for c in cmd))
    return "\n".join(lines) + "\n"


def _memory_mb(memory: str) -> int:
    from dask.utils import parse_bytes

    return max(1, int(parse_bytes(memory) // 2**20))
