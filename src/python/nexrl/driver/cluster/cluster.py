"""Build the Dask cluster a recipe asks for: the same code on a laptop and a cluster.

``cluster.type`` (``CLUSTER_TYPES``: a registered name, or a plugin's own
``(ClusterRequest) -> ClusterHandle`` function):

* ``local``: a ``LocalCluster`` of worker processes on this machine. Every
  worker offers ``GPU`` resource units (``resource.trainer_gpus``, 1 by
  default, also on CPU-only machines, so trainer actors are placed the same
  way everywhere) and ``CPU`` units equal to its threads for rollout futures.
* ``address``: connect to a running scheduler.
* ``slurm``: every part of the run in Slurm jobs (``nexrl.driver.cluster.slurm``): rollout
  workers (a dask-jobqueue ``SLURMCluster``), one job per trainer rank and the
  embedded inference server's job; all cancelled by ``close()``.
* ``kubernetes``: every part of the run in pods (``nexrl.driver.cluster.kubernetes``): a
  dask-kubernetes ``DaskCluster`` of rollout workers, one worker group per trainer
  rank and one for the embedded inference server; all deleted by ``close()``.

``cluster.tls`` (``nexrl.driver.cluster.tls``) puts every comm of local, address and
Slurm clusters on TLS: the scheduler listens on ``tls://``, and the workers and the
driver's client present the run's certificate.

Whatever the type, a recipe's ``plugins:`` are imported in every worker, present and
future (``nexrl.core.process.worker_plugin``), before ``start_cluster`` returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexrl.core.config.sections.cluster import ClusterConfig
from nexrl.core.plugins.registry import Registry
from nexrl.core.process import own_session
from nexrl.core.util.dask_workers import workers_of

logger = logging.getLogger(__name__)


@dataclass
class ClusterHandle:
    """A connected client and the cluster object it owns (None for 'address').

    On Slurm and Kubernetes, ``trainer_workers[r]`` is the worker of trainer rank
    ``r``'s job (pod) and ``inference_worker`` the worker that hosts the embedded
    server (None elsewhere: trainer ranks are placed by resources, the server is a
    child of the driver); ``inference_group`` is the Kubernetes worker group whose
    pod (restarted by its Deployment) hosts the server."""

    client: Any
    cluster: Any | None
    slurm_jobs: Any | None = None  # nexrl.driver.cluster.slurm.SlurmJobs
    trainer_workers: list[str] | None = None
    inference_worker: str | None = None
    inference_group: str | None = None
    should_stop: Callable[[], bool] | None = None  # the run's Ctrl-C: ends a wait for a job
    _closed: bool = field(default=False, repr=False)
    _address: str = field(default="", repr=False)
    _scheduler_id: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        with contextlib.suppress(Exception):  # remembered: asked for after a loss
            self._address = str(self.client.scheduler.address)
        with contextlib.suppress(Exception):
            self._scheduler_id = str(self.client.scheduler_info()["id"])

    @property
    def dashboard_link(self) -> str:
        return str(self.client.dashboard_link)

    @property
    def scheduler_address(self) -> str:
        """The scheduler's comm address (``tls://…`` with ``cluster.tls``)."""
        return str(self.client.scheduler.address)

    @property
    def address(self) -> str:
        """The scheduler's address, also once the scheduler is gone."""
        if not self._address:
            self._address = self.scheduler_address
        return self._address

    def scheduler_lost(self, timeout_s: float = 5.0) -> bool:
        """True when this run's scheduler no longer answers at its address: nothing
        accepts connections there (it was killed, or its machine is gone), or what
        accepts them is not that scheduler (a dying process, another program that took
        the port). A fresh connection and Dask's ``identity`` call, each bounded by
        ``timeout_s``: it never waits on the client's own reconnect attempts."""
        import asyncio
        import concurrent.futures

        from distributed.comm import connect
        from distributed.core import send_recv

        try:
            address = self.address
        except Exception:  # the client never knew its scheduler: nothing to compare
            return False
        if address.startswith("inproc://"):
            return False

        async def identity() -> dict[str, Any]:
            args = getattr(self.client, "connection_args", {}) or {}
            comm = await connect(address, timeout=timeout_s, **args)
            try:
                return dict(await send_recv(comm, op="identity"))
            finally:
                comm.abort()

        async def bounded() -> dict[str, Any]:  # connect's handshake read has no timeout
            return await asyncio.wait_for(identity(), timeout_s)

        try:  # on a thread of its own: the caller may be inside an event loop
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                info = pool.submit(asyncio.run, bounded()).result()
        except Exception:  # refused, reset, timed out, not Dask's protocol
            return True
        if info.get("type") != "Scheduler":
            return True
        return bool(self._scheduler_id) and str(info.get("id")) != self._scheduler_id

    def job_ids(self) -> dict[str, list[str]]:
        """``{role: [Slurm job id, ...]}`` of a Slurm run (empty elsewhere)."""
        if self.slurm_jobs is None:
            return {}
        ids: dict[str, list[str]] = {"rollout": self.slurm_jobs.rollout_job_ids()}
        for job in self.slurm_jobs.submitted:
            ids.setdefault(job.role, []).append(job.job_id)
        return ids

    def live_inference_worker(self) -> str:
        """The inference job's worker address; on Slurm, a job that ended (scancel,
        node failure, walltime) is replaced by a new one first; on Kubernetes, the
        group's restarted pod is waited for."""
        workers = workers_of(self.client)
        if self.inference_worker in workers:
            return str(self.inference_worker)
        if self.inference_group is not None:
            from nexrl.driver.cluster.kubernetes import wait_for_groups

            group = self.inference_group
            self.inference_worker = wait_for_groups(self.client, [group], 600.0)[group]
            return self.inference_worker
        if self.slurm_jobs is None:
            raise RuntimeError("this cluster has no inference job")
        index = sum(1 for j in self.slurm_jobs.submitted if j.role == "inference")
        job = self.slurm_jobs.submit("inference", index)
        workers = self.slurm_jobs.wait_for_workers(self.client, [job], self.should_stop)
        self.inference_worker = workers[job.name]
        return self.inference_worker

    def server_factory(self) -> Any:
        """How the inference supervisor starts the embedded server: None (a child of
        the driver) unless the cluster has an inference job (Slurm)."""
        if self.inference_worker is None:
            return None
        from functools import partial

        from nexrl.driver.cluster.remote_server import RemoteEmbeddedServer

        return partial(RemoteEmbeddedServer, self.client, self.live_inference_worker)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.slurm_jobs is not None:
            self.slurm_jobs.cancel()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()  # a SLURMCluster scancels its rollout jobs
        if self.slurm_jobs is not None:
            self.slurm_jobs.remove_tls_files()  # a temporary certificate's files


def worker_resources(gpus: int, threads: int) -> dict[str, float]:
    return {"GPU": float(gpus), "CPU": float(threads)}


def local_cluster_kwargs(
    cfg: ClusterConfig, gpus_per_worker: int = 1, security: Any | None = None
) -> dict[str, Any]:
    """LocalCluster arguments: worker processes sized to the machine (on TLS with
    ``security``)."""
    n = cfg.n_workers or max(2, min(4, os.cpu_count() or 2))
    tls: dict[str, Any] = {}
    if security is not None:
        from nexrl.driver.cluster.tls import PROTOCOL

        tls = {"security": security, "protocol": PROTOCOL}
    from nexrl.core.process.forkserver import changed_environ

    env = changed_environ()  # forked from the warm parent: what the driver set since
    return {
        **({"env": env} if env else {}),
        **tls,
        "n_workers": n,
        "threads_per_worker": cfg.threads_per_worker,
        "processes": True,
        "resources": worker_resources(gpus_per_worker, cfg.threads_per_worker),
        "dashboard_address": cfg.dashboard_address,
        "host": "127.0.0.1",
        # each worker leaves the terminal's session: a Ctrl-C reaches the driver only
        "preload": [own_session.__name__],
    }


@dataclass(frozen=True)
class ClusterRequest:
    """What a cluster type is asked to start: the recipe's ``cluster`` section and the
    run's needs (see ``start_cluster``)."""

    cfg: ClusterConfig
    experiment: str
    gpus_per_worker: int = 1
    trainer_ranks: int = 1
    inference_job: bool = False
    log_dir: str | Path | None = None
    security: Any = None  # distributed.Security of cluster.tls, or None
    should_stop: Callable[[], bool] | None = None


# ``cluster.type``: a function ``(ClusterRequest) -> ClusterHandle``; a plugin adds its own
# with ``@CLUSTER_TYPES.register("name")``, or a recipe names one 'path/to/file.py:start'.
CLUSTER_TYPES: Registry[Callable[[ClusterRequest], ClusterHandle]] = Registry(
    "cluster type", field="cluster.type"
)


@CLUSTER_TYPES.register("address")
def _address(req: ClusterRequest) -> ClusterHandle:
    from distributed import Client

    return ClusterHandle(Client(req.cfg.address, timeout="60s", security=req.security), None)


def dashboard_exposure(address: str) -> str | None:
    """The line that says the dashboard is reachable from the network (None: it
    listens on loopback only)."""
    from nexrl.core.util.net import is_loopback

    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    if host and is_loopback(host):
        return None
    return (
        f"the Dask dashboard listens beyond loopback (cluster.dashboard_address="
        f"{address!r}): anyone who reaches this machine can open it and the run's page, "
        "without authentication; '127.0.0.1:8787' keeps it to this machine"
    )


def _say_exposure(address: str) -> None:
    line = dashboard_exposure(address)
    if line is not None:
        logger.warning(line)


@CLUSTER_TYPES.register("local")
def _local(req: ClusterRequest) -> ClusterHandle:
    from distributed import Client, LocalCluster

    _say_exposure(req.cfg.dashboard_address)

    with warnings.catch_warnings():
        # "Port 8787 is already in use ... Hosting the HTTP server on port N instead"
        # (4 lines): another run holds the port; the URL the run prints is the real one
        warnings.filterwarnings("ignore", message=r"Port \d+ is already in use")
        cluster = LocalCluster(**local_cluster_kwargs(req.cfg, req.gpus_per_worker, req.security))
    return ClusterHandle(Client(cluster, timeout="120s", security=req.security), cluster)


@CLUSTER_TYPES.register("slurm")
def _slurm(req: ClusterRequest) -> ClusterHandle:
    from nexrl.driver.cluster.slurm import start_slurm

    _say_exposure(req.cfg.dashboard_address)

    client, cluster, jobs, trainers, server = start_slurm(
        req.cfg.slurm,
        req.experiment,
        trainer_gpus=req.gpus_per_worker,
        trainer_ranks=req.trainer_ranks,
        inference=req.inference_job,
        log_dir=req.log_dir,
        security=req.security,
        should_stop=req.should_stop,
        dashboard_address=req.cfg.dashboard_address,
    )
    return ClusterHandle(client, cluster, jobs, trainers, server, should_stop=req.should_stop)


@CLUSTER_TYPES.register("kubernetes")
def _kubernetes(req: ClusterRequest) -> ClusterHandle:
    from nexrl.driver.cluster.kubernetes import group_names, start_kubernetes

    if req.security is not None:  # the recipe check says so first
        raise ValueError("cluster.tls is not wired for cluster.type 'kubernetes'")
    client, cluster, trainers, server = start_kubernetes(
        req.cfg.kubernetes,
        req.experiment,
        trainer_gpus=req.gpus_per_worker,
        trainer_ranks=req.trainer_ranks,
        inference=req.inference_job,
    )
    group = group_names(req.experiment, 0, req.inference_job).get("inference")
    return ClusterHandle(client, cluster, None, trainers, server, group)


def start_cluster(
    cfg: ClusterConfig,
    experiment: str,
    gpus_per_worker: int = 1,
    plugins: Sequence[str] = (),
    *,
    trainer_ranks: int = 1,
    inference_job: bool = False,
    log_dir: str | Path | None = None,
    roots: Sequence[Path] = (),
    should_stop: Callable[[], bool] | None = None,
) -> ClusterHandle:
    """Start (or connect to) the cluster ``cfg.type`` names and return a connected client.

    ``plugins`` (resolved by ``nexrl.core.plugins.resolve_plugins``) are imported in
    every worker, present and future, before the client is returned. On Slurm,
    ``trainer_ranks`` jobs for the trainer and (``inference_job``) one for the
    embedded server are submitted and joined first; job output goes to ``log_dir``.
    On Kubernetes, the same as worker groups (pods). ``roots`` are where relative
    ``cluster.tls`` file paths (and a 'path/to/file.py:start' type) resolve (the
    recipe's roots). ``should_stop`` (the run's Ctrl-C) ends a wait for Slurm jobs
    with ``KeyboardInterrupt``.
    """
    from nexrl.core.process.worker_env import apply_in_driver
    from nexrl.driver.cluster.tls import security as tls_security

    start = CLUSTER_TYPES.get(cfg.type, roots=roots)
    apply_in_driver()  # before any nanny of this process reads its config
    request = ClusterRequest(
        cfg,
        experiment,
        gpus_per_worker,
        trainer_ranks,
        inference_job,
        log_dir,
        tls_security(cfg.tls, roots),
        should_stop,
    )
    return _with_plugins(start(request), plugins)


def _with_plugins(handle: ClusterHandle, plugins: Sequence[str]) -> ClusterHandle:
    if not plugins:
        return handle
    from nexrl.core.process.worker_plugin import install_plugins

    try:
        install_plugins(handle.client, plugins)
    except BaseException:
        handle.close()
        raise
    return handle
