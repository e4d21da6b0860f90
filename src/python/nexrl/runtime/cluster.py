"""Build the Dask cluster a recipe asks for: the same code on a laptop and a cluster.

``cluster.type``:

* ``local``: a ``LocalCluster`` of worker processes on this machine. Every
  worker offers ``GPU`` resource units (``resource.trainer_gpus``, 1 by
  default, also on CPU-only machines, so trainer actors are placed the same
  way everywhere) and ``CPU`` units equal to its threads for rollout futures.
* ``address``: connect to a running scheduler.
* ``slurm``: a dask-jobqueue ``SLURMCluster`` (one worker per job).
* ``kubernetes``: a dask-kubernetes ``KubeCluster`` from a cluster spec.

Whatever the type, a recipe's ``plugins:`` are imported in every worker, present and
future (``nexrl.runtime.worker_plugin``), before ``start_cluster`` returns.

The builders for Slurm and Kubernetes return the keyword arguments / spec so
that they can be inspected (and tested) without a scheduler.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nexrl.config.sections.cluster import ClusterConfig, KubernetesConfig, SlurmConfig


@dataclass
class ClusterHandle:
    """A connected client and the cluster object it owns (None for 'address')."""

    client: Any
    cluster: Any | None

    @property
    def dashboard_link(self) -> str:
        return str(self.client.dashboard_link)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def worker_resources(gpus: int, threads: int) -> dict[str, float]:
    return {"GPU": float(gpus), "CPU": float(threads)}


def local_cluster_kwargs(cfg: ClusterConfig, gpus_per_worker: int = 1) -> dict[str, Any]:
    """LocalCluster arguments: worker processes sized to the machine."""
    n = cfg.n_workers or max(2, min(4, os.cpu_count() or 2))
    return {
        "n_workers": n,
        "threads_per_worker": cfg.threads_per_worker,
        "processes": True,
        "resources": worker_resources(gpus_per_worker, cfg.threads_per_worker),
        "dashboard_address": cfg.dashboard_address,
        "host": "127.0.0.1",
    }


def slurm_cluster_kwargs(cfg: SlurmConfig, threads: int = 1) -> dict[str, Any]:
    """SLURMCluster arguments: partition, account, cores, memory, walltime, GPUs
    (``--gres=gpu:N``), extra ``#SBATCH`` directives and the worker's ``GPU``/``CPU``
    resources."""
    directives = list(cfg.job_directives)
    if cfg.gpus_per_job:
        directives.append(f"--gres=gpu:{cfg.gpus_per_job}")
    res = worker_resources(cfg.gpus_per_job, cfg.cores)
    return {
        "queue": cfg.partition,
        "account": cfg.account,
        "cores": cfg.cores,
        "processes": 1,
        "memory": cfg.memory,
        "walltime": cfg.walltime,
        "job_extra_directives": directives,
        "worker_extra_args": ["--resources", ",".join(f"{k}={v:g}" for k, v in res.items())],
        "python": sys.executable,
    }


def kubernetes_cluster_spec(cfg: KubernetesConfig, name: str) -> dict[str, Any]:
    """A dask-kubernetes ``DaskCluster`` spec with CPU/memory/GPU limits and the
    workers' ``GPU``/``CPU`` Dask resources."""
    from dask_kubernetes.operator import make_cluster_spec

    limits: dict[str, Any] = {"cpu": cfg.cpu, "memory": cfg.memory}
    if cfg.gpus:
        limits["nvidia.com/gpu"] = cfg.gpus
    spec: dict[str, Any] = make_cluster_spec(
        name=name,
        image=cfg.image,
        n_workers=cfg.n_workers,
        resources={"requests": dict(limits), "limits": limits},
    )
    spec["metadata"]["namespace"] = cfg.namespace
    container = spec["spec"]["worker"]["spec"]["containers"][0]
    res = worker_resources(cfg.gpus, int(float(cfg.cpu)))
    container["args"] = [
        *container.get("args", []),
        "--resources",
        ",".join(f"{k}={v:g}" for k, v in res.items()),
    ]
    return spec


def start_cluster(
    cfg: ClusterConfig,
    experiment: str,
    gpus_per_worker: int = 1,
    plugins: Sequence[str] = (),
) -> ClusterHandle:
    """Start (or connect to) the cluster and return a connected client.

    ``plugins`` (resolved by ``nexrl.plugins.resolve_plugins``) are imported in
    every worker, present and future, before the client is returned.
    """
    from distributed import Client

    if cfg.type == "address":
        return _with_plugins(ClusterHandle(Client(cfg.address, timeout="60s"), None), plugins)
    cluster: Any
    if cfg.type == "local":
        from distributed import LocalCluster

        cluster = LocalCluster(**local_cluster_kwargs(cfg, gpus_per_worker))
    elif cfg.type == "slurm":
        from dask_jobqueue import SLURMCluster

        cluster = SLURMCluster(**slurm_cluster_kwargs(cfg.slurm))
        cluster.scale(jobs=cfg.slurm.n_jobs)
    else:
        from dask_kubernetes.operator import KubeCluster

        spec = kubernetes_cluster_spec(cfg.kubernetes, name=f"nexrl-{experiment}")
        cluster = KubeCluster(custom_cluster_spec=spec, namespace=cfg.kubernetes.namespace)
    return _with_plugins(ClusterHandle(Client(cluster, timeout="120s"), cluster), plugins)


def _with_plugins(handle: ClusterHandle, plugins: Sequence[str]) -> ClusterHandle:
    if not plugins:
        return handle
    from nexrl.runtime.worker_plugin import install_plugins

    try:
        install_plugins(handle.client, plugins)
    except BaseException:
        handle.close()
        raise
    return handle
