"""``cluster``: where the Dask scheduler and workers come from."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.config.fields import cfg_field


@dataclass
class SlurmConfig:
    partition: str | None = cfg_field(None, help="Slurm partition (queue).")
    account: str | None = cfg_field(None, help="Slurm account.")
    cores: int = cfg_field(4, help="Cores per job (one Dask worker per job).", minimum=1)
    memory: str = cfg_field("16GB", help="Memory per job.")
    walltime: str = cfg_field("04:00:00", help="Job walltime.")
    gpus_per_job: int = cfg_field(0, help="GPUs per job (--gres=gpu:N).", minimum=0)
    n_jobs: int = cfg_field(1, help="Jobs (workers) to start.", minimum=1)
    job_directives: list[str] = cfg_field(
        default_factory=list, help="Extra #SBATCH lines, e.g. '--constraint=a100'."
    )


@dataclass
class KubernetesConfig:
    image: str = cfg_field("ghcr.io/dask/dask:latest", help="Worker image with nexrl installed.")
    namespace: str = cfg_field("default", help="Kubernetes namespace.")
    n_workers: int = cfg_field(1, help="Worker pods.", minimum=1)
    cpu: str = cfg_field("4", help="CPU request/limit per worker.")
    memory: str = cfg_field("16Gi", help="Memory request/limit per worker.")
    gpus: int = cfg_field(0, help="nvidia.com/gpu per worker.", minimum=0)


@dataclass
class ClusterConfig:
    type: str = cfg_field(
        "local",
        help="'local' (LocalCluster on this machine), 'address' (existing scheduler), "
        "'slurm' (dask-jobqueue) or 'kubernetes' (dask-kubernetes).",
        choices=("local", "address", "slurm", "kubernetes"),
    )
    address: str | None = cfg_field(None, help="Scheduler address for type 'address'.")
    n_workers: int | None = cfg_field(
        None, help="Local workers (null = sized to the machine).", minimum=1
    )
    threads_per_worker: int = cfg_field(1, help="Threads per local worker.", minimum=1)
    dashboard_address: str = cfg_field(":8787", help="Dask dashboard address.")
    slurm: SlurmConfig = cfg_field(default_factory=SlurmConfig, help="Settings for type 'slurm'.")
    kubernetes: KubernetesConfig = cfg_field(
        default_factory=KubernetesConfig, help="Settings for type 'kubernetes'."
    )
