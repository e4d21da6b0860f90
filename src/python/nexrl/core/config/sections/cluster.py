"""``cluster``: where the Dask scheduler and workers come from."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import cfg_field


@dataclass
class SlurmJobSize:
    """The size of one Slurm job (one Dask worker per job)."""

    cores: int = cfg_field(2, help="Cores per job (--cpus-per-task).", minimum=1)
    memory: str = cfg_field("16GB", help="Memory per job (--mem).")
    gpus: int = cfg_field(1, help="GPUs per job (--gres=gpu:N; 0 = no gres line).", minimum=0)


@dataclass
class SlurmRolloutJobs(SlurmJobSize):
    """Rollout/evaluator worker jobs: how many, and the size of each."""

    cores: int = cfg_field(1, help="Cores per job (--cpus-per-task).", minimum=1)
    memory: str = cfg_field("4GB", help="Memory per job (--mem).")
    gpus: int = cfg_field(0, help="GPUs per job (--gres=gpu:N; 0 = no gres line).", minimum=0)
    jobs: int = cfg_field(2, help="Rollout jobs to keep running.", minimum=1)
    max_jobs: int | None = cfg_field(
        None,
        help="If set, rollout jobs adapt between 'jobs' and this many by the rollout "
        "backlog (dask-jobqueue adapt); null = always 'jobs'.",
        minimum=1,
    )


@dataclass
class SlurmConfig:
    """``cluster.type: slurm``: the driver stays where it is started (a login
    node, or a batch job of its own); rollout/evaluator workers, each trainer
    rank and the embedded inference server each run in Slurm jobs that nexrl
    submits (dask-jobqueue renders the job scripts) and cancels when the run ends."""

    partition: str | None = cfg_field(None, help="Slurm partition (queue) of every job.")
    account: str | None = cfg_field(None, help="Slurm account of every job.")
    walltime: str = cfg_field("04:00:00", help="Walltime of every job (-t).")
    job_directives: list[str] = cfg_field(
        default_factory=list, help="Extra #SBATCH lines for every job, e.g. '--constraint=a100'."
    )
    prologue: list[str] = cfg_field(
        default_factory=list,
        help="Shell lines run at the start of every job before the Dask worker, e.g. "
        "'module load cuda' or 'source /path/to/venv/bin/activate'.",
    )
    scheduler_host: str | None = cfg_field(
        None,
        help="Address the jobs reach the driver's Dask scheduler on: this machine's "
        "address on the network the compute nodes reach (null = the address of its route "
        "to the internet, dask-jobqueue's default; '127.0.0.1' on a single node). Checked "
        "at start: it must be an address of this machine.",
    )
    interface: str | None = cfg_field(
        None,
        help="Network interface the jobs' Dask workers listen on, e.g. 'ib0' (null = the "
        "address facing the scheduler); the scheduler's too unless scheduler_host is set. "
        "The inference server binds its worker's address and gloo uses its interface.",
    )
    python: str | None = cfg_field(
        None,
        help="Python that runs the Dask worker in the jobs (null = the driver's own "
        "interpreter, which must be on storage the compute nodes see).",
    )
    job_start_timeout_s: float = cfg_field(
        600.0,
        help="How long to wait for a submitted job's worker to join before the run stops "
        "with the job's id and state (e.g. PENDING (Resources)).",
        minimum=1.0,
    )
    rollout: SlurmRolloutJobs = cfg_field(
        default_factory=SlurmRolloutJobs,
        help="Rollout/evaluator worker jobs (their Dask workers offer resource "
        "CPU=cores and run the rollout and evaluator futures).",
    )
    trainer: SlurmJobSize = cfg_field(
        default_factory=SlurmJobSize,
        help="Each trainer rank's job (trainer.world_size jobs). Their Dask workers "
        "offer resource GPU=resource.trainer_gpus, the units a trainer actor asks for, "
        "whatever 'gpus' (the physical gres) is: set gpus: 0 on a CPU partition.",
    )
    inference: SlurmJobSize = cfg_field(
        default_factory=SlurmJobSize,
        help="The embedded inference server's job (service.inference_service without "
        "base_urls: one replica). Its Dask worker offers resource INFERENCE=1 and "
        "starts the server on its node.",
    )


@dataclass
class KubePodSize:
    """The size of one pod (one Dask worker per pod): requests = limits."""

    cpu: str = cfg_field(
        "4", help="CPU request/limit per pod (Kubernetes quantity, e.g. 4 or 500m)."
    )
    memory: str = cfg_field("16Gi", help="Memory request/limit per pod (e.g. 16Gi).")
    gpus: int = cfg_field(1, help="nvidia.com/gpu per pod (0 = none).", minimum=0)


@dataclass
class KubernetesConfig:
    """Every part of a run in pods of a dask-kubernetes cluster (the Dask operator
    must be installed in the cluster): the scheduler and the rollout worker pods of
    a ``DaskCluster``, one ``DaskWorkerGroup`` per trainer rank and one for the
    embedded inference server."""

    image: str = cfg_field("ghcr.io/dask/dask:latest", help="Worker image with nexrl installed.")
    namespace: str = cfg_field("default", help="Kubernetes namespace.")
    n_workers: int = cfg_field(1, help="Rollout worker pods.", minimum=1)
    cpu: str = cfg_field("4", help="CPU request/limit per rollout worker pod.")
    memory: str = cfg_field("16Gi", help="Memory request/limit per rollout worker pod.")
    gpus: int = cfg_field(0, help="nvidia.com/gpu per rollout worker pod.", minimum=0)
    trainer: KubePodSize = cfg_field(
        default_factory=KubePodSize,
        help="Each trainer rank's pod (trainer.world_size of them, one worker group "
        "each). Its Dask worker offers GPU=resource.trainer_gpus, whatever the pod's GPUs.",
    )
    inference: KubePodSize = cfg_field(
        default_factory=KubePodSize,
        help="The embedded inference server's pod (service.inference_service without "
        "base_urls). Its Dask worker offers INFERENCE=1 and starts the server in it.",
    )
    worker_start_timeout_s: float = cfg_field(
        600.0,
        help="How long to wait for the trainer and inference pods' workers to join "
        "(image pulls, GPU node scale-up) before stopping with an error naming them.",
        minimum=1,
    )


@dataclass
class TlsConfig:
    """``cluster.tls``: TLS on every Dask comm (scheduler, workers, the driver's
    client) with distributed's ``Security``: encrypted, and only peers holding a
    certificate the CA signed can connect. Off unless ``temporary`` or the three
    files are set. The Dask dashboard (HTTP) is not covered."""

    temporary: bool = cfg_field(
        False,
        help="A self-signed certificate and key generated for this run "
        "(distributed.Security.temporary()); held in memory on a local cluster, written "
        "to output_dir/logs/slurm/tls/ (mode 0600, removed at the end) for Slurm "
        "jobs. Not for 'address' (that scheduler has its own CA).",
    )
    ca_file: str | None = cfg_field(
        None,
        help="CA certificate (PEM) every component trusts; set with cert and key.",
        path=True,
    )
    cert: str | None = cfg_field(
        None,
        help="Certificate (PEM, signed by ca_file) that the scheduler, workers and "
        "client present; on Slurm the jobs read it from the same path.",
        path=True,
    )
    key: str | None = cfg_field(None, help="Private key (PEM) of cert.", path=True)


@dataclass
class ClusterConfig:
    type: str = cfg_field(
        "local",
        help="'local' (LocalCluster on this machine), 'address' (existing scheduler), "
        "'slurm' (dask-jobqueue) or 'kubernetes' (dask-kubernetes); one of your own is a "
        "function (ClusterRequest) -> ClusterHandle (nexrl.driver.cluster.cluster).",
        registry="cluster type",
    )
    address: str | None = cfg_field(None, help="Scheduler address for type 'address'.")
    n_workers: int | None = cfg_field(
        None, help="Local workers (null = sized to the machine).", minimum=1
    )
    threads_per_worker: int = cfg_field(1, help="Threads per local worker.", minimum=1)
    dashboard_address: str = cfg_field(
        "127.0.0.1:8787",
        help="Dask dashboard address (host:port; port 0: any free one). The default "
        "listens on this machine only; an address beyond loopback (':8787' is every "
        "interface) makes the dashboard and the run's page reachable from the network, "
        "without authentication, and the run says so in one line.",
    )
    warm_parent: bool = cfg_field(
        True,
        help="Type 'local': fork the workers and the embedded server from one parent "
        "that imports torch and transformers while the driver checks the recipe "
        "(start-up in about half the time on 2 cores); false = each process starts "
        "fresh and imports them itself.",
    )
    tls: TlsConfig = cfg_field(
        default_factory=TlsConfig,
        help="TLS for the Dask comms (types local, address and slurm; off by default).",
    )
    slurm: SlurmConfig = cfg_field(default_factory=SlurmConfig, help="Settings for type 'slurm'.")
    kubernetes: KubernetesConfig = cfg_field(
        default_factory=KubernetesConfig, help="Settings for type 'kubernetes'."
    )
