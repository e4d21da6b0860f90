"""Cluster builders: a real LocalCluster, and the Slurm job scripts (the Kubernetes
resources: test_kubernetes.py)."""

from __future__ import annotations

import os
import sys

from nexrl.core.config.sections.cluster import (
    ClusterConfig,
    SlurmConfig,
    SlurmJobSize,
    SlurmRolloutJobs,
)
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.cluster import start_cluster
from nexrl.driver.cluster.roles import role_resources
from nexrl.driver.cluster.slurm import job_kwargs


def test_local_cluster_offers_gpu_and_cpu_resources_per_worker() -> None:
    handle = start_cluster(ClusterConfig(n_workers=2, dashboard_address="127.0.0.1:0"), "t")
    try:
        info = workers_of(handle.client)
        assert len(info) == 2
        assert all(w["resources"] == {"GPU": 1.0, "CPU": 1.0} for w in info.values())
        fut = handle.client.submit(lambda: 42, resources={"GPU": 1, "CPU": 1})
        assert fut.result(timeout=60) == 42
        assert handle.dashboard_link.startswith("http://")
        # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in the worker processes (and, for a
        # LocalCluster, in the driver that spawns the embedded server) unless told not
        # to: with it a training step took ~1.9x as long (nexrl.core.process.worker_env).
        envs = handle.client.run(lambda: dict(os.environ))
        assert all("MALLOC_TRIM_THRESHOLD_" not in e for e in envs.values())
        assert all(e.get("OMP_NUM_THREADS") == "1" for e in envs.values())
        assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
        # Dask's recent-message logs keep 50 entries, not 1,000, in the scheduler (here),
        # the client and every worker: they held a long run's old task messages
        lengths = handle.client.run(_recent_message_log_lengths)
        assert set(lengths.values()) == {50}
        scheduler = handle.client.run_on_scheduler(_scheduler_log_lengths)
        assert set(scheduler) == {50}
        assert handle.client.scheduler_comm.recent_message_log.maxlen == 50  # the client
    finally:
        handle.close()


def _recent_message_log_lengths(dask_worker: object) -> int | None:
    return dask_worker.batched_stream.recent_message_log.maxlen  # type: ignore[attr-defined]


def _scheduler_log_lengths(dask_scheduler: object) -> list[int | None]:
    s: object = dask_scheduler
    return [
        s.transition_log.maxlen,  # type: ignore[attr-defined]
        *(b.recent_message_log.maxlen for b in s.stream_comms.values()),  # type: ignore[attr-defined]
    ]


def test_slurm_job_scripts_carry_the_recipe_settings_and_each_roles_resources() -> None:
    from dask_jobqueue.slurm import SLURMJob

    cfg = SlurmConfig(
        partition="gpu",
        account="rl",
        walltime="02:00:00",
        job_directives=["--constraint=a100"],
        prologue=["module load cuda"],
        rollout=SlurmRolloutJobs(jobs=3, cores=4, memory="16GB", gpus=0),
        trainer=SlurmJobSize(cores=8, memory="64GB", gpus=2),
    )
    scripts = {
        role: SLURMJob(
            scheduler="tcp://10.0.0.1:8786",
            name=f"w-{role}",
            **job_kwargs(cfg, role, experiment="exp", trainer_gpus=2),
        ).job_script()
        for role in ("rollout", "trainer", "inference")
    }
    for script in scripts.values():
        for line in ("#SBATCH -p gpu", "#SBATCH -A rl", "#SBATCH -t 02:00:00"):
            assert line in script
        assert "#SBATCH --constraint=a100" in script
        assert "#SBATCH --no-requeue" in script  # the run replaces a failed node's jobs itself
        assert script.index("module load cuda") < script.index("distributed.cli.dask_worker")
        assert script.count(sys.executable) == 1
        # the job's nanny leaves glibc's malloc tunables alone (nexrl.core.process.worker_env)
        assert "export DASK_INTERNAL_INHERIT_CONFIG=" in script
    assert "#SBATCH -J nexrl-exp-rollout" in scripts["rollout"]
    assert "#SBATCH --cpus-per-task=4" in scripts["rollout"]
    assert "--gres" not in scripts["rollout"]
    assert "--resources CPU=4" in scripts["rollout"]
    assert "#SBATCH --gres=gpu:2" in scripts["trainer"]
    assert "#SBATCH --cpus-per-task=8" in scripts["trainer"]
    assert "--resources GPU=2" in scripts["trainer"]  # resource.trainer_gpus, by construction
    assert "--resources INFERENCE=1" in scripts["inference"]


def test_trainer_jobs_offer_what_a_trainer_asks_for_even_on_a_cpu_partition() -> None:
    cpu_partition = SlurmJobSize(cores=2, memory="8GB", gpus=0)
    assert role_resources("trainer", cpu_partition.cores, trainer_gpus=1) == {"GPU": 1.0}
    assert role_resources("trainer", cpu_partition.cores, trainer_gpus=0) == {"GPU": 1.0}
    assert role_resources("rollout", cpu_partition.cores, trainer_gpus=1) == {"CPU": 2.0}


def test_scheduler_lost_only_when_this_runs_scheduler_no_longer_answers() -> None:
    """The controller's "the Dask scheduler is gone" line rests on this check: a live
    scheduler is not lost; once it is gone, neither another program that took its port
    nor a new scheduler on the same port counts as it."""
    import socket

    from distributed import Client, LocalCluster

    from nexrl.driver.cluster.cluster import ClusterHandle

    def scheduler(port: int = 0) -> LocalCluster:  # in this process, on TCP
        return LocalCluster(
            n_workers=0,
            processes=False,
            protocol="tcp://",
            host="127.0.0.1",
            scheduler_port=port,
            dashboard_address="127.0.0.1:0",
        )

    first = scheduler()
    client = Client(first, timeout="10s")
    handle = ClusterHandle(client, first)
    port = int(handle.address.rsplit(":", 1)[1])
    try:
        assert handle.scheduler_lost(timeout_s=5) is False
        first.close()
        assert handle.scheduler_lost(timeout_s=5) is True  # refused
        with socket.create_server(("127.0.0.1", port)):  # another program on the port
            assert handle.scheduler_lost(timeout_s=2) is True
        second = scheduler(port)
        try:
            assert second.scheduler_address == handle.address
            assert handle.scheduler_lost(timeout_s=5) is True  # not this run's scheduler
        finally:
            second.close()
    finally:
        client.close()
        first.close()
