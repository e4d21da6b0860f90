"""kill -9 the Dask scheduler of a ``cluster.type=address`` run (a real ``dask
scheduler`` and ``dask worker`` processes the test starts): the driver stops within a
bounded time with one ``error:`` line naming the scheduler's address and how to
resume, exit 1, and leaves no process behind; with a new scheduler and workers the
same command resumes from the last checkpoint, each step and each group once."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests import _launch
from tests.e2e._groups import assert_each_step_and_group_once
from tests.e2e._recipe import RECIPE, overrides, subprocess_env
from tests.e2e.test_kill_and_resume import DEADLINE_S, wait_for_step

STEPS = 6
STOP_BOUND_S = 120  # the client's reconnect timeout is 60 s; the stop must not wait longer


class ExternalCluster:
    """A ``dask scheduler`` and two ``dask worker`` processes (each offering the ``GPU``
    unit a trainer rank asks for and ``CPU`` units for rollouts, as a local run's do)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        info = folder / "scheduler.json"
        py = [sys.executable, "-m"]
        logs = [open(folder / name, "w") for name in ("scheduler.log", "w0.log", "w1.log")]  # noqa: SIM115
        self._logs = logs
        self.scheduler = _launch.Popen(
            [
                *py,
                *("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"),
                *("--dashboard-address", ":0", "--scheduler-file", str(info)),
            ],
            env=subprocess_env(),
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while not info.exists() and time.monotonic() < deadline:
            assert self.scheduler.poll() is None, (folder / "scheduler.log").read_text()
            time.sleep(0.2)
        self.address = str(json.loads(info.read_text())["address"])
        self.workers = [
            _launch.Popen(
                [
                    *py,
                    *("distributed.cli.dask_worker", self.address, "--nthreads", "2"),
                    *("--resources", "GPU=1 CPU=2", "--no-dashboard"),
                ],
                env=subprocess_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for log in logs[1:]
        ]
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster (workers' nannies and their worker children)."""
        procs = []
        for p in [self.scheduler, *self.workers]:
            try:
                top = psutil.Process(p.pid)
                procs += [top, *top.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return procs

    def close(self) -> None:
        for p in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        for p in [self.scheduler, *self.workers]:
            p.wait(timeout=30)
        for log in self._logs:
            log.close()


def _train(out: Path, address: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *overrides(
            out,
            "trainer.save_every=2",
            "cluster.type=address",
            f"cluster.address={address}",
            steps=STEPS,
        ),
    ]


def test_the_scheduler_killed_stops_the_run_clearly_and_it_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first_cluster = ExternalCluster(tmp_path / "cluster1")
    driver: subprocess.Popen[Any] | None = None
    try:
        driver = _launch.Popen(
            _train(out, first_cluster.address),
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_step(out, 3, driver)  # checkpoint 2 is written
        children = psutil.Process(driver.pid).children(recursive=True)  # the inference server
        cluster_procs = first_cluster.processes()
        first_cluster.scheduler.kill()  # SIGKILL
        killed_at = time.monotonic()
        _, err = driver.communicate(timeout=STOP_BOUND_S)
        stopped_after = time.monotonic() - killed_at
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
    print(f"the driver stopped {stopped_after:.1f}s after the scheduler was killed")
    assert driver.returncode == 1, err[-3000:]
    assert stopped_after < STOP_BOUND_S
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    line = errors[0]
    print(line)
    assert f"the Dask scheduler at {first_cluster.address} is gone" in line, line
    assert "start a scheduler and its workers again" in line and "run the same command" in line
    assert "Traceback" not in err
    resumed_step = int(re.search(r"resume from its checkpoint of step (\d+)$", line).group(1))  # type: ignore[union-attr]
    assert resumed_step >= 2 and (out / "checkpoints" / f"step_{resumed_step}").is_dir()
    # Nothing left behind: the driver's inference server, and the workers, which exit by
    # themselves once their scheduler is gone.
    _, alive = psutil.wait_procs(children + cluster_procs, timeout=90)
    assert alive == [], [p.cmdline() for p in alive]
    first_cluster.close()

    second_cluster = ExternalCluster(tmp_path / "cluster2")
    try:
        second = _launch.run(
            _train(out, second_cluster.address),
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    finally:
        second_cluster.close()
    assert second.returncode == 0, second.stderr[-3000:]
    log = (out / "logs" / "driver.log").read_text()
    assert f"at step {resumed_step} (policy v{resumed_step})" in log
    # the rows the first run logged after its checkpoint were redone: each step once
    assert_each_step_and_group_once(out, STEPS)
