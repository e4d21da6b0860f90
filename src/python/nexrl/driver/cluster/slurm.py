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
  (:mod:`nexrl.driver.cluster.remote_server`).

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
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexrl.core.config.sections.cluster import SlurmConfig
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.slurm_job import (
    NEVER_STARTS,
    SAY_EVERY_S,
    STATES_EVERY_S,
    SlurmError,
    SubmittedJob,
    driver_script,
    job_kwargs,
    job_lines,
    job_nodes,
    job_states,
    pending_reason,
    sbatch,
)

__all__ = [
    "SlurmError",
    "SlurmJobs",
    "SubmittedJob",
    "check_scheduler_host",
    "driver_script",
    "job_kwargs",
    "job_states",
    "sbatch",
    "start_slurm",
]

logger = logging.getLogger(__name__)


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
            from nexrl.driver.cluster.tls import PROTOCOL

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
        timeout = self.cfg.job_start_timeout_s
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
                    f"(cluster.slurm.job_start_timeout_s): {job_lines(missing)}; see their "
                    f"logs in {self.log_dir or 'the job output files'}" + self._unreachable(missing)
                )
            if now - checked >= STATES_EVERY_S:
                checked = now
                states = job_states([j.job_id for j in missing])
                never = [j for j in missing if pending_reason(states.get(j.job_id)) in NEVER_STARTS]
                if never:
                    raise SlurmError(
                        f"Slurm will never start {job_lines(never, states)}: the job asks for "
                        f"more than partition {self.cfg.partition or '(default)'} offers; "
                        "lower cluster.slurm."
                        f"{never[0].role}.cores / memory / gpus, or choose another "
                        "cluster.slurm.partition"
                    )
                if now - said >= SAY_EVERY_S:
                    said = now
                    logger.info(
                        "slurm: waiting for %s (%.0fs of cluster.slurm.job_start_timeout_s=%g)",
                        job_lines(missing, states),
                        now - start,
                        timeout,
                    )
            time.sleep(0.5)

    def _unreachable(self, jobs: Sequence[SubmittedJob]) -> str:
        """What to say of jobs that run but whose worker never joined: their node, the
        last line of their log, and the address they were told to reach."""
        running = job_nodes([j.job_id for j in jobs])
        if not running:
            return ""
        said = []
        for j in jobs:
            if j.job_id not in running:
                continue
            last = ""
            if self.log_dir:
                err = Path(self.log_dir) / f"{j.name}-{j.job_id}.err"
                with contextlib.suppress(OSError):
                    lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln]
                    last = f" (its log: {lines[-1].strip()[:300]})" if lines else ""
            said.append(f"{j.name} runs on node {running[j.job_id]}{last}")
        return (
            f". {'; '.join(said)}: a job that runs but never joins cannot reach the "
            f"scheduler at {self.cluster.scheduler_address}; set cluster.slurm.scheduler_host "
            "to this machine's address on the network the compute nodes reach"
        )

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


def check_scheduler_host(host: str | None) -> None:
    """A clear error, before the scheduler tries to bind it, when
    ``cluster.slurm.scheduler_host`` is not an address of this machine (the scheduler
    listens on it; the jobs connect to it)."""
    import socket

    from nexrl.core.util.net import is_loopback, local_addresses

    if not host or host in ("0.0.0.0", "::"):
        return
    try:
        addrs = {str(i[4][0]).split("%")[0] for i in socket.getaddrinfo(host, None)}
    except OSError as exc:
        raise SlurmError(
            f"cluster.slurm.scheduler_host={host} does not resolve here ({exc}); set it to "
            "this machine's address on the network the compute nodes reach"
        ) from None
    mine = local_addresses()
    if addrs & set(mine) or any(is_loopback(a) for a in addrs):
        return
    shown = ", ".join(f"{a} ({name})" for a, name in sorted(mine.items()))
    raise SlurmError(
        f"cluster.slurm.scheduler_host={host} is not an address of this machine (it has "
        f"{shown}): the driver's Dask scheduler listens there and every job connects to "
        "it; set it to this machine's address on the network the compute nodes reach"
    )


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
    dashboard_address: str | None = None,
) -> tuple[Any, Any, SlurmJobs, list[str], str | None]:
    """Start the rollout cluster and submit the trainer (and inference) jobs;
    every comm on TLS with ``security`` (``nexrl.driver.cluster.tls.security``).

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
    check_scheduler_host(cfg.scheduler_host)
    scheduler_options: dict[str, Any] = {"host": cfg.scheduler_host} if cfg.scheduler_host else {}
    if dashboard_address is not None:  # cluster.dashboard_address, as for a local cluster
        scheduler_options["dashboard_address"] = dashboard_address
    tls_dir = None
    if security is not None:
        import tempfile

        from nexrl.driver.cluster.tls import PROTOCOL, write_pem_files

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
