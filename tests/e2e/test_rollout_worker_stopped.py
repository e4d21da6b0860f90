"""End-to-end: a rollout worker's process stops answering (``SIGSTOP``: what a debugger,
a swapped-out or wedged process looks like) in a run of the default recipe on a local
cluster. Its Dask worker sends no heartbeat; after ``runtime_monitor.worker_silent_s``
the driver drops it (its tasks run on the other workers at once), kills it (its nanny
starts a fresh one) and says so in one line naming its address and pid. The step
waiting on it completes within the detection time plus a step (before: the run waited
out the whole stop, up to ``task_timeout_s``), every group is trained once, and a
``SIGCONT`` afterwards changes nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import psutil

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.e2e.test_kill_and_resume import assert_pool_record_matches, wait_for_step

SILENT_S = 10.0  # well above a loaded worker's heartbeat interval (0.5-5 s)
STEP_S = 30.0  # a step of this recipe on a loaded 2-core CI machine, generously
STEPS = 5


def test_a_stopped_rollout_worker_is_dropped_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"runtime_monitor.worker_silent_s={SILENT_S:g}",
            "runtime_monitor.task_timeout_s=600",  # the stop is not waited out
            steps=STEPS,
        ),
    )
    controller = Controller(recipe, progress=False)
    stopped: list[tuple[int, str, float, int]] = []  # (pid, address, when, rows by then)

    def stop_one_rollout_worker() -> None:
        wait_for_step(out, 1)
        c = controller.components
        assert c is not None
        trainer_pid = c.trainer.setup_info()[0]["pid"]
        pids = c.cluster.client.run(os.getpid)
        address, pid = next((a, p) for a, p in pids.items() if p != trainer_pid)
        os.kill(pid, signal.SIGSTOP)
        stopped.append((pid, str(address), time.monotonic(), len(train_rows(out))))

    thread = threading.Thread(target=stop_one_rollout_worker, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=10)
    assert stopped, "no rollout worker was stopped"
    pid, address, when, rows_then = stopped[0]
    try:
        assert result.steps == STEPS
        rows = train_rows(out)
        # the steps that waited on the stopped worker got their batch within the
        # detection time plus a step (before: up to task_timeout_s, or the whole stop)
        waits = [r["timing/wait_batch"] for r in rows[rows_then:]]
        assert waits, "no step trained after the stop"
        assert max(waits) < SILENT_S + STEP_S, waits
        log = (out / "logs" / "driver.log").read_text()
        line = next((x for x in log.splitlines() if "sent no heartbeat for" in x), None)
        assert line is not None, log[-3000:]
        assert address in line and f"pid {pid} " in line, line
        assert "killed; its nanny starts a fresh worker" in line, line
        assert log.count("sent no heartbeat for") == 1, log[-3000:]  # one line, once
        assert rows[-1]["cluster/workers_lost"] >= 1
        # every group trained once, every step a full batch of whole groups
        assert [r["batch/size"] for r in rows] == [32] * STEPS
        assert 8 * len(controller.scheduler.trained) == STEPS * 32
        assert rows[-1]["pool/delivered_total"] == STEPS * 32
        assert_pool_record_matches(out, rows)
    finally:
        # SIGCONT afterwards changes nothing: the process was killed (a zombie at most)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert gone, f"the stopped worker (pid {pid}) is still running"
    # the whole run took far less than the 600 s a task would have waited
    assert time.monotonic() - when < SILENT_S + STEPS * STEP_S
