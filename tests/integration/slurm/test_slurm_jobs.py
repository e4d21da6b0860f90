"""A run's Slurm jobs on a real (one-node) Slurm: rollout, trainer and inference
jobs submitted by ``start_cluster``, each worker in its own job with exactly the
resources its work asks for, and every job cancelled by ``close()``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nexrl.core.config.sections.cluster import (
    ClusterConfig,
    SlurmConfig,
    SlurmJobSize,
    SlurmRolloutJobs,
)
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.cluster import start_cluster
from nexrl.driver.cluster.slurm import SlurmError
from tests import _launch

from ._slurm import SLURM_TOKEN, require_slurm, squeue, wait_gone


def _job_env() -> dict[str, str | None]:
    keys = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")
    return {k: os.environ.get(k) for k in keys}


def test_rollout_trainer_and_inference_each_run_in_their_own_slurm_jobs(tmp_path: Path) -> None:
    require_slurm()
    slurm = SlurmConfig(
        partition="debug",
        walltime="00:20:00",
        scheduler_host="127.0.0.1",
        job_directives=["--comment=nexrl-test"],
        prologue=["export NEXRL_PROLOGUE_RAN=yes"],
        job_start_timeout_s=120,
        rollout=SlurmRolloutJobs(jobs=2, cores=1, memory="1GB", gpus=0),
        trainer=SlurmJobSize(cores=1, memory="1GB", gpus=1),
        inference=SlurmJobSize(cores=1, memory="1GB", gpus=0),
    )
    cfg = ClusterConfig(type="slurm", slurm=slurm, dashboard_address="127.0.0.1:0")
    handle = start_cluster(
        cfg, "jobs", 1, trainer_ranks=2, inference_job=True, log_dir=tmp_path / "slurm"
    )
    ids = handle.job_ids()
    all_ids = [i for role in ids.values() for i in role]
    try:
        client = handle.client
        client.wait_for_workers(5, timeout=120)  # 2 rollout + 2 trainer + 1 inference
        assert len(ids["trainer"]) == 2 and len(ids["inference"]) == 1
        assert len(ids["rollout"]) == 2 and len(set(all_ids)) == 5

        workers = workers_of(client)
        envs = client.run(_job_env)
        # Every worker runs inside the Slurm job that nexrl submitted for it.
        assert sorted(e["SLURM_JOB_ID"] for e in envs.values()) == sorted(all_ids)
        # Each job's nanny left glibc's malloc tunable out (Dask sets it by default; it
        # made training steps ~1.9x slower) and kept the rest of its environment.
        assert all(e["MALLOC_TRIM_THRESHOLD_"] is None for e in envs.values())
        assert all(e["OMP_NUM_THREADS"] == "1" for e in envs.values())
        assert all(client.run(lambda: os.environ.get("NEXRL_PROLOGUE_RAN")).values())
        trainers = handle.trainer_workers or []
        assert len(trainers) == 2
        for rank, addr in enumerate(trainers):
            assert envs[addr]["SLURM_JOB_NAME"] == f"nexrl-jobs-trainer-{rank}"
            assert workers[addr]["resources"] == {"GPU": 1.0}
        assert handle.inference_worker is not None
        assert workers[handle.inference_worker]["resources"] == {"INFERENCE": 1.0}
        rollout = [a for a in workers if a not in trainers and a != handle.inference_worker]
        assert all(workers[a]["resources"] == {"CPU": 1.0} for a in rollout)

        # What each kind of work asks for lands only where it belongs.
        futs = [client.submit(os.getpid, resources={"CPU": 1}, pure=False) for _ in range(8)]
        client.gather(futs)
        assert {client.who_has(f)[f.key][0] for f in futs} <= set(rollout)
        gpu = client.submit(os.getpid, resources={"GPU": 1}, pure=False)
        gpu.result(timeout=60)
        assert client.who_has(gpu)[gpu.key][0] in trainers

        # The trainer job asked Slurm for its GPU (gres), with the recipe's directives.
        show = _launch.run(
            ["scontrol", "show", "job", ids["trainer"][0]], capture_output=True, text=True
        ).stdout
        assert "gres/gpu=1" in show or "gres:gpu:1" in show or "gpu:1" in show
        assert "Comment=nexrl-test" in show and "Partition=debug" in show
    finally:
        handle.close()
    assert wait_gone(all_ids) == {}, "jobs left in squeue after close()"


def test_sbatch_dry_run_prints_a_driver_script_slurm_accepts(tmp_path: Path) -> None:
    """``--sbatch --dry-run``: the whole run as one batch job, checked by sbatch itself."""
    require_slurm()
    import sys

    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        "recipes/max_digit/max_digit_tiny.yaml",
        "--sbatch",
        "--dry-run",
        f"output_dir={out}",
        "cluster.type=slurm",
        "cluster.slurm.partition=debug",
        "cluster.slurm.walltime=00:30:00",
        "cluster.slurm.prologue=['export NEXRL_X=1']",
        "seed=3",
        "service.inference_service.api_key=${oc.env:NEXRL_TOKEN}",  # off-node: a token
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "NEXRL_TOKEN": "t0ken-x9"}
    shown = _launch.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    assert "t0ken-x9" not in shown  # the job reads it from its environment
    assert "#SBATCH -J nexrl-max_digit_tiny-driver" in shown
    assert "#SBATCH -p debug" in shown and "#SBATCH -t 00:30:00" in shown
    assert f"#SBATCH -o {out}/logs/slurm/driver-%j.out" in shown
    assert shown.index("export NEXRL_X=1") < shown.index("nexrl.driver.cli.train")
    last = shown.strip().splitlines()[-1]
    assert last.startswith(f"exec {sys.executable} -m nexrl.driver.cli.train ")
    assert "seed=3" in last and "--sbatch" not in last
    script = tmp_path / "driver.sh"
    script.write_text(shown)
    test_only = _launch.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True)
    assert test_only.returncode == 0 and "to start at" in test_only.stderr, test_only.stderr


def test_the_embedded_server_runs_in_the_inference_job_and_moves_to_a_new_one_when_it_ends(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The supervisor starts the server in the inference job (not next to the driver);
    the job is scancel-ed; the health check submits a new inference job and starts
    the server there; the real openai client gets replies from both."""
    require_slurm()
    import openai

    from nexrl.core.config.sections.runtime import InferenceServiceConfig
    from nexrl.inference.spec import InferenceSpec
    from nexrl.inference.supervisor import InferenceSupervisor

    slurm = SlurmConfig(
        partition="debug",
        walltime="00:20:00",
        scheduler_host="127.0.0.1",
        job_start_timeout_s=120,
        rollout=SlurmRolloutJobs(jobs=1, cores=1, memory="1GB", gpus=0),
        inference=SlurmJobSize(cores=1, memory="2GB", gpus=0),
    )
    cfg = ClusterConfig(type="slurm", slurm=slurm, dashboard_address="127.0.0.1:0")
    handle = start_cluster(
        cfg, "srv", 1, trainer_ranks=0, inference_job=True, log_dir=tmp_path / "slurm"
    )
    service = InferenceServiceConfig(startup_timeout_s=300, api_key=SLURM_TOKEN)
    supervisor = InferenceSupervisor(
        InferenceSpec(service), log_dir=tmp_path / "logs", server_factory=handle.server_factory()
    )
    ids: list[str] = []
    try:
        supervisor.start(tiny_model_dir, 0)

        def ask() -> str:
            (url,) = supervisor.base_urls
            client = openai.OpenAI(
                base_url=f"{url}/v1", api_key=SLURM_TOKEN, timeout=60, max_retries=1
            )
            reply = client.chat.completions.create(
                model=service.served_model_name,
                messages=[{"role": "user", "content": "1 2 3"}],
                max_tokens=2,
            )
            return reply.choices[0].message.content or ""

        first = supervisor.server.info
        ids.append(first["slurm_job_id"])
        assert first["slurm_job_id"] == handle.job_ids()["inference"][0]
        assert isinstance(ask(), str)
        assert supervisor.check() is False  # healthy: nothing to do

        _launch.run(["scancel", first["slurm_job_id"]], check=True)
        assert wait_gone([first["slurm_job_id"]]) == {}
        assert supervisor.check() is True  # restarted, in a new job
        second = supervisor.server.info
        ids.append(second["slurm_job_id"])
        assert second["slurm_job_id"] not in (None, first["slurm_job_id"])
        assert handle.job_ids()["inference"] == ids
        assert supervisor.base_urls == [second["base_url"]]
        assert isinstance(ask(), str)
        assert supervisor.restarts == 1
    finally:
        supervisor.close()
        handle.close()
    assert wait_gone(ids + handle.job_ids().get("rollout", [])) == {}


def test_rollout_jobs_adapt_to_the_backlog_between_jobs_and_max_jobs(tmp_path: Path) -> None:
    """``rollout.max_jobs`` > ``rollout.jobs``: a backlog of rollout work (futures
    asking for ``CPU``) brings more rollout jobs, up to ``max_jobs``, and they are
    cancelled again when it is done; the trainer job is never touched."""
    require_slurm()
    slurm = SlurmConfig(
        partition="debug",
        walltime="00:20:00",
        scheduler_host="127.0.0.1",
        job_start_timeout_s=120,
        rollout=SlurmRolloutJobs(jobs=1, max_jobs=3, cores=1, memory="1GB", gpus=0),
        trainer=SlurmJobSize(cores=1, memory="1GB", gpus=0),
    )
    cfg = ClusterConfig(type="slurm", slurm=slurm, dashboard_address="127.0.0.1:0")
    handle = start_cluster(cfg, "adapt", 1, trainer_ranks=1, log_dir=tmp_path / "slurm")
    jobs = handle.slurm_jobs
    assert jobs is not None
    trainer_ids = handle.job_ids()["trainer"]
    seen: set[str] = set()
    try:
        client = handle.client
        deadline = time.monotonic() + 180
        while len(jobs.rollout_job_ids()) != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(jobs.rollout_job_ids()) == 1  # the minimum, with no backlog

        # 60 rollouts of 1 s each: a backlog one worker needs a minute for.
        futs = [client.submit(time.sleep, 1.0, resources={"CPU": 1}, pure=False) for _ in range(60)]
        while len(seen) < 3 and time.monotonic() < deadline:
            seen.update(jobs.rollout_job_ids())
            time.sleep(0.5)
        assert len(seen) == 3, f"rollout jobs seen during the backlog: {sorted(seen)}"
        assert len(jobs.rollout_job_ids()) <= 3  # never beyond max_jobs
        client.gather(futs)

        # Back to the minimum once the backlog is gone; the trainer job stays.
        deadline = time.monotonic() + 180
        while len(jobs.rollout_job_ids()) > 1 and time.monotonic() < deadline:
            time.sleep(1.0)
        assert len(jobs.rollout_job_ids()) == 1
        assert squeue(trainer_ids) == {trainer_ids[0]: "RUNNING"}
    finally:
        handle.close()
    assert wait_gone([*seen, *trainer_ids]) == {}, "jobs left in squeue after close()"


def _named_jobs(prefix: str) -> list[str]:
    """Ids of the jobs squeue lists whose name starts with ``prefix``."""
    out = _launch.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True)
    return [
        i
        for i, name in (line.split() for line in out.stdout.splitlines())
        if name.startswith(prefix)
    ]


def _small_slurm(**trainer: object) -> ClusterConfig:
    slurm = SlurmConfig(
        partition="debug",
        walltime="00:10:00",
        scheduler_host="127.0.0.1",
        job_start_timeout_s=600,  # the errors below come long before it
        rollout=SlurmRolloutJobs(jobs=1, cores=1, memory="1GB", gpus=0),
        trainer=SlurmJobSize(**{"cores": 1, "memory": "1GB", "gpus": 0, **trainer}),  # type: ignore[arg-type]
    )
    return ClusterConfig(type="slurm", slurm=slurm, dashboard_address="127.0.0.1:0")


def test_a_job_slurm_will_never_start_is_an_error_at_once_naming_the_field(
    tmp_path: Path,
) -> None:
    """More cores than the partition's node has: pending for ever (PartitionConfig).
    The run says so as soon as squeue shows it, not after job_start_timeout_s."""
    require_slurm()
    with pytest.raises(SlurmError) as err:
        start_cluster(_small_slurm(cores=1000), "never", 1, log_dir=tmp_path / "slurm")
    message = str(err.value)
    assert message.startswith("Slurm will never start nexrl-never-trainer-0 (job ")
    assert "PENDING (PartitionConfig)" in message
    assert "cluster.slurm.trainer.cores / memory / gpus" in message
    assert "job_start_timeout_s" not in message  # not the timeout's error
    assert wait_gone(_named_jobs("nexrl-never-")) == {}


def test_ctrl_c_while_slurm_jobs_are_pending_stops_the_wait_and_cancels_them(
    tmp_path: Path,
) -> None:
    """The run's Ctrl-C (``should_stop``) ends the wait for the jobs at once."""
    require_slurm()
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # Ctrl-C arrives while the jobs are being waited for

    with pytest.raises(KeyboardInterrupt):
        start_cluster(
            _small_slurm(), "stopped", 1, log_dir=tmp_path / "slurm", should_stop=should_stop
        )
    assert len(asked) == 3
    assert wait_gone(_named_jobs("nexrl-stopped-")) == {}
