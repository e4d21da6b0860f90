"""A trainer job dies on Slurm (``scancel``, node failure, walltime): the run stops
with one line naming the trainer job and how to resume, cancels every job it
submitted, and the same command resumes from the last checkpoint with each step
and each group trained once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests import _launch
from tests.e2e._recipe import RECIPE, subprocess_env, train_rows
from tests.e2e.test_kill_and_resume import DEADLINE_S, expected_group_ids, wait_for_step
from tests.e2e.test_train_run import delivered_pairs
from tests.integration.slurm._slurm import SLURM_RUN, require_slurm, wait_gone

STEPS = 6


def command(out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        f"output_dir={out}",
        f"trainer.total_train_steps={STEPS}",
        "trainer.save_every=2",
        "trajectory_pool.batch_size=32",
        "trainer.micro_batch_size=32",
        "validate.validate_before_train=false",
        "validate.every=0",
        "cluster.dashboard_address=127.0.0.1:0",
        *SLURM_RUN,
        "runtime_monitor.health_check_interval_s=1",
    ]


def job_ids(out: Path) -> dict[str, list[str]]:
    return dict(json.loads((out / "cluster.json").read_text())["slurm_jobs"])


def test_a_dead_trainer_job_stops_the_run_clearly_and_the_same_command_resumes(
    tmp_path: Path,
) -> None:
    require_slurm()
    out = tmp_path / "run"
    first = _launch.Popen(
        command(out),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(out, 3, first)  # checkpoint 2 is written, step 3 trained
        first_jobs = job_ids(out)
        (trainer_job,) = first_jobs["trainer"]
        _launch.run(["scancel", trainer_job], check=True)
        _, err = first.communicate(timeout=DEADLINE_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    assert "trainer" in errors[0] and trainer_job in errors[0], errors[0]
    assert "resume" in errors[0], errors[0]
    assert "Traceback" not in err
    every_job = [i for ids in first_jobs.values() for i in ids]
    assert wait_gone(every_job) == {}, "jobs of the stopped run left in squeue"

    second = _launch.run(
        command(out), env=subprocess_env(), capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert second.returncode == 0, second.stderr[-3000:]
    driver_log = (out / "logs" / "driver.log").read_text()
    assert "resumed from" in driver_log
    # Each step once in metrics.jsonl; each trajectory delivered once over both runs;
    # the trained groups are exactly the first STEPS x 4 of the data order.
    assert [r["step"] for r in train_rows(out)] == list(range(1, STEPS + 1))
    pairs = delivered_pairs(out)
    assert len(pairs) == STEPS * 32 and len(set(pairs)) == len(pairs)
    assert {g for g, _ in pairs} == expected_group_ids(out, STEPS * 4)
    assert wait_gone([i for ids in job_ids(out).values() for i in ids]) == {}
