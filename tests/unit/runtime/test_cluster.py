"""Cluster builders: a real LocalCluster, and the Slurm job script / Kubernetes spec."""

from __future__ import annotations

import sys

from nexrl.config.sections.cluster import ClusterConfig, KubernetesConfig, SlurmConfig
from nexrl.runtime.cluster import kubernetes_cluster_spec, slurm_cluster_kwargs, start_cluster


def test_local_cluster_offers_gpu_and_cpu_resources_per_worker() -> None:
    handle = start_cluster(ClusterConfig(n_workers=2, dashboard_address=":0"), "t")
    try:
        info = handle.client.scheduler_info()["workers"]
        assert len(info) == 2
        assert all(w["resources"] == {"GPU": 1.0, "CPU": 1.0} for w in info.values())
        fut = handle.client.submit(lambda: 42, resources={"GPU": 1, "CPU": 1})
        assert fut.result(timeout=60) == 42
        assert handle.dashboard_link.startswith("http://")
    finally:
        handle.close()


def test_slurm_job_script_carries_the_recipe_settings() -> None:
    from dask_jobqueue import SLURMCluster

    cfg = SlurmConfig(
        partition="gpu",
        account="rl",
        cores=4,
        memory="16GB",
        walltime="02:00:00",
        gpus_per_job=2,
        job_directives=["--constraint=a100"],
    )
    cluster = SLURMCluster(**slurm_cluster_kwargs(cfg), scheduler_options={"host": "127.0.0.1"})
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    for line in (
        "#SBATCH -p gpu",
        "#SBATCH -A rl",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH -t 02:00:00",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --constraint=a100",
    ):
        assert line in script
    assert "--resources GPU=2,CPU=4" in script
    assert script.count(sys.executable) == 1


def test_kubernetes_spec_has_gpu_limits_and_worker_resources() -> None:
    spec = kubernetes_cluster_spec(
        KubernetesConfig(image="me/nexrl:1", namespace="rl", n_workers=3, cpu="8", gpus=1),
        name="nexrl-exp",
    )
    assert spec["metadata"] == {"name": "nexrl-exp", "namespace": "rl"}
    worker = spec["spec"]["worker"]
    assert worker["replicas"] == 3
    (container,) = worker["spec"]["containers"]
    assert container["image"] == "me/nexrl:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["limits"]["cpu"] == "8"
    assert container["args"][-2:] == ["--resources", "GPU=1,CPU=8"]
