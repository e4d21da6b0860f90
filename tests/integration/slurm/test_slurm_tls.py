"""``cluster.tls`` on the real test Slurm: every job's worker joins the driver's
scheduler over ``tls://`` with the run's temporary certificate, read from files
only the run's user can read and removed when the run ends."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from distributed import Client
from distributed.comm.core import CommClosedError

from nexrl.core.config.sections.cluster import (
    ClusterConfig,
    SlurmConfig,
    SlurmJobSize,
    SlurmRolloutJobs,
    TlsConfig,
)
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.cluster import start_cluster

from ._slurm import require_slurm, wait_gone


def test_slurm_jobs_join_a_tls_scheduler_with_the_runs_temporary_certificate(
    tmp_path: Path,
) -> None:
    require_slurm()
    slurm = SlurmConfig(
        partition="debug",
        walltime="00:10:00",
        scheduler_host="127.0.0.1",
        job_start_timeout_s=120,
        rollout=SlurmRolloutJobs(jobs=1, cores=1, memory="1GB", gpus=0),
        trainer=SlurmJobSize(cores=1, memory="1GB", gpus=0),
    )
    cfg = ClusterConfig(
        type="slurm", slurm=slurm, dashboard_address="127.0.0.1:0", tls=TlsConfig(temporary=True)
    )
    log_dir = tmp_path / "slurm"
    handle = start_cluster(cfg, "tls", 1, trainer_ranks=1, log_dir=log_dir)
    ids = [i for role in handle.job_ids().values() for i in role]
    tls_dir = log_dir / "tls"
    try:
        client = handle.client
        client.wait_for_workers(2, timeout=120)  # 1 rollout job + 1 trainer job
        # the rollout job is submitted by the SLURMCluster in the background: read the
        # ids again once both workers joined
        ids = [i for role in handle.job_ids().values() for i in role]
        assert len(ids) == 2
        address = handle.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        workers = workers_of(client)
        assert len(workers) == 2 and all(a.startswith("tls://") for a in workers)
        envs = client.run(lambda: os.environ.get("SLURM_JOB_ID"))
        assert sorted(envs.values()) == sorted(ids)  # each worker inside its own job
        (trainer,) = handle.trainer_workers or []
        fut = client.submit(os.getpid, resources={"GPU": 1}, pure=False)
        fut.result(timeout=60)
        assert client.who_has(fut)[fut.key][0] == trainer

        # The jobs were told to speak TLS and where the certificate is ...
        assert handle.cluster is not None
        script = handle.cluster.job_script()
        assert "--protocol tls://" in script and f"--tls-key {tls_dir}/" in script
        # ... which only this user can read.
        assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o700
        pems = sorted(tls_dir.iterdir())
        assert [p.suffix for p in pems] == [".pem", ".pem"]  # the certificate and its key
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pems)
        with pytest.raises(CommClosedError):  # plaintext: the TLS handshake fails
            Client(address.replace("tls://", "tcp://"), timeout="10s")
    finally:
        handle.close()
    assert not tls_dir.exists()  # the key does not outlive the run
    assert wait_gone(ids) == {}, "jobs left in squeue after close()"
