"""A run's Slurm jobs: rollout workers, one job per trainer rank, the inference job.

``cluster.type: slurm`` (``cluster.slurm.*``, :class:`SlurmConfig`). The Dask
scheduler runs in the driver (a login node, or the driver's own batch job);
every other part of the run is a Dask worker in a Slurm job that this module
submits and, when the run ends, cancels:

* rollout jobs: a dask-jobqueue ``SLURMCluster`` adapting between
  ``rollout.jobs`` and ``rollout.max_jobs`` (by the backlog); their workers offer
  ``CPU=cores`` and run the rollout and evaluator futures. A job that dies
  (``scancel``, node failure, walltime) is replaced within seconds; the
  controller rolls its groups out again.
* trainer jobs: one per trainer rank, named ``nexrl-<experiment>-trainer-<rank>``;
  their workers offer ``GPU=resource.trainer_gpus`` (what a trainer actor asks
  for, by construction) and the driver pins rank ``r`` to job ``r``'s worker.
* the inference job (when nexrl runs the embedded server): its worker offers
  ``INFERENCE=1`` and starts the server on its node
  (:mod:`nexrl.runtime.remote_server`).

Job scripts are rendered by dask-jobqueue's ``SLURMJob`` (so they are the
scripts dask-jobqueue users know) and each starts with the recipe's
``prologue`` lines. When ``python`` is not set, the jobs run the driver's own
interpreter with the driver's ``sys.path`` exported, so a worker imports the
same nexrl (and recipe plugins) the driver does, also under ``./pants run``.

With ``cluster.tls`` every job's worker is started with ``--protocol tls://`` and
the ``--tls-*`` files of the run's certificate; a ``temporary`` certificate is
written to ``<log_dir>/tls/`` (0600) for the jobs and removed when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexrl.config.sections.cluster import SlurmConfig, SlurmJobSize
from nexrl.errors import NexrlError
from nexrl.runtime.roles import resources_arg, role_resources
from nexrl.runtime.worker_env import job_environment
from nexrl.util.dask_workers import workers_of

__all__ = [
    "SlurmError",
    "SlurmJobs",
    "SubmittedJob",
    "job_kwargs",
    "sbatch",
    "start_slurm",
]

logger = logging.getLogger(__name__)

DEATH_TIMEOUT_S = 120  # a job's worker exits this long after losing the driver's scheduler


class SlurmError(RuntimeError, NexrlError):
    """A Slurm job could not be submitted, or its worker never joined."""


def import_jobqueue() -> Any:
    """``dask_jobqueue``, imported without losing this process's SIGINT handler.

    Importing it runs ``dask_jobqueue.runner``, which sets SIGINT to ``sys.exit()``
    for the whole process. In the driver that replaced the controller's Ctrl-C
    handler (checkpoint, exit 130): a Ctrl-C on a Slurm run exited 0, silently,
    without a checkpoint. The handler in place before the import is put back.
    """
    import signal

    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # pragma: no cover - no signals here
        previous = None
    import dask_jobqueue
    import dask_jobqueue.slurm

    if previous is not None:
        with contextlib.suppress(ValueError):  # not the main thread: it was not changed
            if signal.getsignal(signal.SIGINT) is not previous:
                signal.signal(signal.SIGINT, previous)
    return dask_jobqueue


def _prologue(cfg: SlurmConfig) -> list[str]:
    lines = list(cfg.prologue)
    if cfg.python is None:  # the driver's interpreter: give it the driver's imports
        path = os.pathsep.join(p for p in sys.path if p)
        lines.append(f"export PYTHONPATH='{path}'")
    lines.append(f"cd '{os.getcwd()}'")
    # the job's nanny leaves glibc's malloc tunables alone (nexrl.runtime.worker_env)
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


def _reason(state: str | None) -> str:
    """``Resources`` of ``PENDING (Resources)``."""
    if not state or "(" not in state:
        return ""
    return state.split("(", 1)[1].rstrip(")")


def _states(jobs: Sequence[SubmittedJob], states: dict[str, str] | None = None) -> str:
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


@dataclass
class SlurmJobs:
    """The jobs nexrl submits itself (trainer ranks, inference) next to the
    ``SLURMCluster``'s rollout jobs; ``cancel()`` ends every one of them."""

    cluster: Any  # the SLURMCluster (its scheduler, its rollout jobs)
    cfg: SlurmConfig
    experiment: str
    trainer_gpus: int = 1
    log_dir: str | None = None
    security: Any | None = None  # distributed.Security with file paths (cluster.tls)
    tls_dir: Path | None = None  # where a temporary certificate was written
    submitted: list[SubmittedJob] = field(default_factory=list)

    def submit(self, role: str, index: int) -> SubmittedJob:
        SLURMJob = import_jobqueue().slurm.SLURMJob

        kwargs = job_kwargs(
            self.cfg,
            role,
            experiment=self.experiment,
            trainer_gpus=self.trainer_gpus,
            log_dir=self.log_dir,
        )
        name = f"{kwargs['job_name']}-{index}"
        kwargs["job_name"] = name
        if self.security is not None:
            from nexrl.runtime.tls import PROTOCOL

            kwargs.update(security=self.security, protocol=PROTOCOL)
        script = SLURMJob(
            scheduler=self.cluster.scheduler_address, name=name, **kwargs
        ).job_script()
        job = SubmittedJob(role, name, sbatch(script, name))
        self.submitted.append(job)
        logger.info("slurm: submitted %s job %s (%s)", role, job.job_id, name)
        return job

    def rollout_job_ids(self) -> list[str]:
        return [str(j.job_id) for j in self.cluster.workers.values() if j.job_id]

    def wait_for_workers(
        self,
        client: Any,
        jobs: Sequence[SubmittedJob],
        should_stop: Callable[[], bool] | None = None,
    ) -> dict[str, str]:
        """``{job name: worker address}`` once every job's worker has joined.

        While it waits: every ``STATES_EVERY_S`` the jobs' Slurm states are read; a job
        Slurm will never start (``NEVER_STARTS``: more than its partition offers) is a
        clear error at once, and every ``SAY_EVERY_S`` a line says what is pending. After
        ``job_start_timeout_s``: a clear error naming the jobs still missing and their
        states. ``should_stop`` (Ctrl-C) ends the wait with ``KeyboardInterrupt``."""
        start = time.monotonic()
        timeout = float(self.cfg.job_start_timeout_s)
        want = {j.name: j for j in jobs}
        checked = said = start
        while True:
            workers = workers_of(client)
            found = {w["name"]: addr for addr, w in workers.items() if w.get("name") in want}
            if len(found) == len(want):
                return found
            if should_stop is not None and should_stop():
                raise KeyboardInterrupt("stopped while waiting for the Slurm jobs to start")
            now = time.monotonic()
            missing = [want[n] for n in want if n not in found]
            if now - start > timeout:
                raise SlurmError(
                    f"Slurm jobs did not start a worker within {timeout:g}s "
                    f"(cluster.slurm.job_start_timeout_s): {_states(missing)}; see their "
                    f"logs in {self.log_dir or 'the job output files'}"
                )
            if now - checked >= STATES_EVERY_S:
                checked = now
                states = job_states([j.job_id for j in missing])
                never = [j for j in missing if _reason(states.get(j.job_id)) in NEVER_STARTS]
                if never:
                    raise SlurmError(
                        f"Slurm will never start {_states(never, states)}: the job asks for "
                        f"more than partition {self.cfg.partition or '(default)'} offers; "
                        "lower cluster.slurm."
                        f"{never[0].role}.cores / memory / gpus, or choose another "
                        "cluster.slurm.partition"
                    )
                if now - said >= SAY_EVERY_S:
                    said = now
                    logger.info(
                        "slurm: waiting for %s (%.0fs of cluster.slurm.job_start_timeout_s=%g)",
                        _states(missing, states),
                        now - start,
                        timeout,
                    )
            time.sleep(0.5)

    def cancel(self) -> None:
        """scancel every job this run submitted (the rollout jobs via the cluster)."""
        ids = [j.job_id for j in self.submitted]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60, check=False)
            rollout = self.rollout_job_ids()
            logger.info(
                "slurm: cancelled jobs %s%s",
                " ".join(ids),
                f" (rollout jobs {' '.join(rollout)} end with the cluster)" if rollout else "",
            )
        self.submitted.clear()

    def remove_tls_files(self) -> None:
        """Delete a temporary certificate's files (after every job has ended)."""
        if self.tls_dir is not None:
            import shutil

            shutil.rmtree(self.tls_dir, ignore_errors=True)
            self.tls_dir = None


def _rollout_adaptive() -> type:
    from distributed.deploy.adaptive import Adaptive

    class RolloutAdaptive(Adaptive):
        """Scales the rollout jobs only: the trainer and inference workers share the
        scheduler but are not the cluster's to close."""

        async def workers_to_close(self, target: int) -> list[str]:
            names = await super().workers_to_close(target)
            own = set(getattr(self.cluster, "worker_spec", {}))
            return [n for n in names if n in own]

    return RolloutAdaptive


def start_slurm(
    cfg: SlurmConfig,
    experiment: str,
    *,
    trainer_gpus: int,
    trainer_ranks: int,
    inference: bool,
    log_dir: str | Path | None = None,
    security: Any | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[Any, Any, SlurmJobs, list[str], str | None]:
    """Start the rollout cluster and submit the trainer (and inference) jobs;
    every comm on TLS with ``security`` (``nexrl.runtime.tls.security``).

    Returns ``(client, cluster, jobs, trainer_workers, inference_worker)`` once
    every trainer/inference worker has joined; ``trainer_workers[r]`` is rank
    ``r``'s worker address.
    """
    from distributed import Client

    SLURMCluster = import_jobqueue().SLURMCluster

    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    kwargs = job_kwargs(
        cfg, "rollout", experiment=experiment, trainer_gpus=trainer_gpus, log_dir=log_dir
    )
    scheduler_options = {"host": cfg.scheduler_host} if cfg.scheduler_host else {}
    tls_dir = None
    if security is not None:
        import tempfile

        from nexrl.runtime.tls import PROTOCOL, write_pem_files

        # on storage the jobs see: the run's log folder, else the working directory
        folder = Path(log_dir) / "tls" if log_dir else Path(tempfile.mkdtemp(".tls", dir="."))
        in_files = write_pem_files(security, folder.resolve())  # the jobs read files
        # ours to remove at the end only if we wrote it (not the recipe's own files)
        tls_dir = folder.resolve() if in_files is not security else None
        if tls_dir is None and not log_dir:
            folder.rmdir()
        security = in_files
        kwargs.update(security=security, protocol=PROTOCOL)
    try:
        cluster = SLURMCluster(**kwargs, scheduler_options=scheduler_options)
    except BaseException:
        if tls_dir is not None:
            import shutil

            shutil.rmtree(tls_dir, ignore_errors=True)
        raise
    jobs = SlurmJobs(
        cluster,
        cfg,
        experiment,
        trainer_gpus,
        str(log_dir) if log_dir else None,
        security=security,
        tls_dir=tls_dir,
    )
    client = None
    try:
        # adapt, also for a fixed count: it replaces a job that died (scancel, node
        # failure, walltime); scale() alone would not.
        cluster.adapt(
            minimum_jobs=cfg.rollout.jobs,
            maximum_jobs=max(cfg.rollout.jobs, cfg.rollout.max_jobs or 0),
            interval="2s",
            Adaptive=_rollout_adaptive(),
        )
        client = Client(cluster, timeout="120s", security=security)
        own = [jobs.submit("trainer", r) for r in range(trainer_ranks)]
        if inference:
            own.append(jobs.submit("inference", 0))
        found = jobs.wait_for_workers(client, own, should_stop)
        trainer_workers = [found[j.name] for j in own if j.role == "trainer"]
        inference_worker = next((found[j.name] for j in own if j.role == "inference"), None)
        return client, cluster, jobs, trainer_workers, inference_worker
    except BaseException:
        jobs.cancel()
        if client is not None:
            client.close()
        cluster.close()
        jobs.remove_tls_files()
        raise


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
    cmd = [sys.executable, "-m", "nexrl.cli.train", recipe, *overrides]
    lines.append("exec " + " ".join(shlex.quote(c) for c in cmd))
    return "\n".join(lines) + "\n"


def _memory_mb(memory: str) -> int:
    from dask.utils import parse_bytes

    return max(1, int(parse_bytes(memory) // 2**20))
