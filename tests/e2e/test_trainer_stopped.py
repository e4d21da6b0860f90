"""End-to-end: the trainer's process stops answering (``SIGSTOP``: what a debugger, a
swapped-out machine or a wedged process looks like). Before, the run waited out the
trainer call's deadline (20 minutes) with nothing on the terminal; Dask kept the
stopped worker. Now its missing heartbeats name it: a notice while it is quiet, then
the run stops with one line saying which rank and how to resume, and the same
command resumes from the last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows
from tests.e2e.test_kill_and_resume import DEADLINE_S, wait_for_step
from tests.e2e.test_train_run import delivered_pairs


def test_a_stopped_trainer_is_named_and_the_run_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE]
    watch = ["runtime_monitor.trainer_silent_s=15", "runtime_monitor.wait_notice_s=5"]
    proc = _launch.Popen(
        [*args, *overrides(out, "trainer.save_every=2", *watch, steps=200)],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stopped: psutil.Process | None = None
    try:
        wait_for_step(out, 3, proc)
        pid = json.loads((out / "cluster.json").read_text())["trainer_ranks"][0]["pid"]
        stopped = psutil.Process(pid)
        os.kill(pid, signal.SIGSTOP)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        if stopped is not None and stopped.is_running():
            stopped.kill()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error: the run stopped:")]
    assert "the trainer failed on rank 0" in line and "no heartbeat from rank 0" in line
    assert "runtime_monitor.trainer_silent_s=15" in line
    if "trainer step: no heartbeat" in line:  # (the stop may land in a checkpoint call)
        # while the step waited: what is wrong and when the run gives up on it
        assert "trainer rank 0 (worker tcp://" in err and "has sent no heartbeat for" in err
        assert "the run stops at runtime_monitor.trainer_silent_s=15" in err
    assert "run the same command again to resume from its checkpoint of step" in line
    stopped_at = max(r["step"] for r in train_rows(out))

    # The same command resumes; every step once, every trajectory delivered once.
    again = _launch.run(
        [*args, *overrides(out, "trainer.save_every=2", *watch, steps=stopped_at + 2)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["step"] for r in train_rows(out)] == list(range(1, stopped_at + 3))
    pairs = delivered_pairs(out)
    assert len(pairs) == (stopped_at + 2) * 32 and len(set(pairs)) == len(pairs)
