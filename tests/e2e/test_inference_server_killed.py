"""kill -9 the embedded inference server mid-run: the driver's health check notices,
restarts it on the newest weights (``InferenceSupervisor.check``), rolls the groups
it was serving out again, and the run finishes with every group trained once and
the policy versions monotonic."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.e2e.test_kill_and_resume import assert_pool_record_matches, wait_for_step

STEPS = 6


def run_with_signal_to_the_server(
    out: Path, sig: signal.Signals, *extra: str
) -> tuple[Controller, list[dict[str, Any]], int]:
    """A run of STEPS steps whose embedded server gets ``sig`` once step 2 is logged;
    ``(controller, training rows, the server's pid)``."""
    recipe = load_recipe_checked(RECIPE, overrides(out, *extra, steps=STEPS))
    controller = Controller(recipe, progress=False)
    hit: list[int] = []

    def signal_the_server() -> None:
        wait_for_step(out, 2)
        c = controller.components
        assert c is not None and c.supervisor.server is not None
        pid = int(c.supervisor.server.pid)
        os.kill(pid, sig)
        hit.append(pid)

    thread = threading.Thread(target=signal_the_server, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=10)
    assert hit, f"the server got no {sig.name}"
    assert result.steps == STEPS
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[-1]["inference/restarts"] == 1, (out / "logs" / "driver.log").read_text()[-3000:]
    return controller, rows, hit[0]


def test_a_killed_inference_server_is_restarted_on_the_newest_weights(tmp_path: Path) -> None:
    out = tmp_path / "run"
    controller, rows, killed = run_with_signal_to_the_server(out, signal.SIGKILL)
    # The restarted server serves the newest weights: rollouts never go back in version,
    # and in sync mode each step still trains on the previous step's weights.
    for r in rows:
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/inference"] == r["step"]
    # Every trained group whole (8) and once; the groups lost with the server were
    # rolled out again; second copies are dropped by the pool before a batch is picked,
    # and any the scheduler still saw were delivered and not trained.
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == STEPS * 32
    delivered = rows[-1]["pool/delivered_total"]
    assert delivered - trained == controller.counters.duplicate_trajectories_dropped
    assert_pool_record_matches(out, rows)

    log = (out / "logs" / "driver.log").read_text()
    # noticed by the health check, or by the reload: no server answering /health
    # before it, or (killed between that check and the reload) the reload's failure
    assert "the embedded server exited (code -9); restarting on v" in log or any(
        f"the server (pid {killed}) {why}" in log
        for why in ("did not answer /health before the reload", "failed the reload (")
    )
    pids = [int(p) for p in re.findall(r"embedded server at \S+ \(pid (\d+)\)", log)]
    assert len(pids) == 2 and pids[0] == killed and pids[1] != killed
    # cluster.json follows the server to its new process and address
    record = json.loads((out / "cluster.json").read_text())
    assert record["inference"]["pid"] == pids[1]
    assert record["inference"]["base_urls"] == controller.parts.supervisor.base_urls


def test_a_hung_inference_server_is_detected_killed_and_replaced(tmp_path: Path) -> None:
    """SIGSTOP: the process lives but answers nothing. After ``unhealthy_after``
    health checks without an answer it is killed and replaced; nothing waits forever."""
    out = tmp_path / "run"
    controller, rows, stopped = run_with_signal_to_the_server(
        out,
        signal.SIGSTOP,
        "runtime_monitor.health_timeout_s=1",
        "runtime_monitor.unhealthy_after=2",
    )
    for r in rows:
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == STEPS * 32

    log = (out / "logs" / "driver.log").read_text()
    # taken for hung by two health checks, or by the reload that found it not answering
    assert (
        "did not answer /health within 1s (1 of 2)" in log
        and f"the server (pid {stopped}) did not answer /health 2 times in a row" in log
    ) or f"the server (pid {stopped}) did not answer /health before the reload" in log
    assert not _alive(stopped)  # the hung process was killed, not left stopped


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_server_killed_under_running_rollouts_costs_no_failure_budget(tmp_path: Path) -> None:
    """kill -9 while a step's rollouts wait on the server, with the default 10 s health
    check: the failed rollouts make the driver look at the server at once (not at the
    next check), and their failures, the dead server's, are not counted against
    ``runtime_monitor.max_task_failures`` (0 here: any counted failure stops the run).
    Before, the run rolled out against the dead address until the next check and a
    default-recipe run stopped with ``21 rollout groups failed``."""
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "runtime_monitor.health_check_interval_s=10",
            "runtime_monitor.max_task_failures=0",
            steps=STEPS,
        ),
    )
    controller = Controller(recipe, progress=False)
    hit: list[int] = []

    def kill_the_server_under_rollouts() -> None:
        wait_for_step(out, 2)
        c = controller.components
        assert c is not None and c.supervisor.server is not None
        pid = int(c.supervisor.server.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(
                g.task is not None and g.task.rollout.status == "pending"
                for g in c.dispatcher.running("train")
            ):
                os.kill(pid, signal.SIGSTOP)  # no request finishes from here on
                time.sleep(0.2)
                if any(
                    g.task is not None and g.task.rollout.status == "pending"
                    for g in c.dispatcher.running("train")
                ):
                    os.kill(pid, signal.SIGKILL)
                    hit.append(pid)
                    return
                os.kill(pid, signal.SIGCONT)  # they had finished: the next step's
            time.sleep(0.001)

    thread = threading.Thread(target=kill_the_server_under_rollouts, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=10)
    assert hit, "the server was never killed with rollouts waiting on it"
    assert result.steps == STEPS
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[-1]["inference/restarts"] == 1
    assert rows[-1]["rollout/failed_groups"] >= 1  # the kill hit running rollouts
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == STEPS * 32
    assert_pool_record_matches(out, rows)
    log = (out / "logs" / "driver.log").read_text()
    # restarted when its rollouts failed, well before the next 10 s health check
    assert "the embedded server exited (code -9); restarting on v" in log
