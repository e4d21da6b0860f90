"""Three rollout workers killed one after another (``kill -9`` of the Dask worker
process hosting rollouts; its nanny starts a fresh one) while the run goes on: the
run finishes, the losses and the failed groups are counted in the metrics, the
groups are rolled out again after a backoff that the log and the metrics show, and
each group is trained once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import dask

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.e2e.test_kill_and_resume import DEADLINE_S, assert_pool_record_matches, wait_for_step
from tests.e2e.test_train_run import processes_using

STEPS = 20
KILLS = 3


def test_three_rollout_workers_killed_in_a_row_the_run_finishes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            "cluster.n_workers=3",
            "rollout_worker.task_retries=3",
            "rollout_worker.retry_backoff_s=0.5",
            steps=STEPS,
        ),
    )
    controller = Controller(recipe, progress=False)
    killed: list[int] = []
    problems: list[str] = []

    def kill_rollout_workers() -> None:
        try:
            wait_for_step(out, 1)
            c = controller.components
            assert c is not None
            client = c.cluster.client
            trainer_pid = c.trainer.setup_info()[0]["pid"]
            deadline = time.monotonic() + DEADLINE_S
            while len(killed) < KILLS and time.monotonic() < deadline:
                pids = client.run(os.getpid, on_error="ignore")
                busy = client.processing()
                victims = [
                    addr
                    for addr, pid in pids.items()
                    if pid != trainer_pid
                    and pid not in killed
                    and any(
                        str(k).startswith(("rollout-", "evaluate-")) for k in busy.get(addr, ())
                    )
                ]
                if not victims or len(pids) < 3:  # wait for the replacement to join
                    time.sleep(0.05)
                    continue
                os.kill(pids[victims[0]], signal.SIGKILL)
                killed.append(pids[victims[0]])
        except Exception as exc:  # reported by the test below, not lost in the thread
            problems.append(repr(exc))

    thread = threading.Thread(target=kill_rollout_workers, daemon=True)
    thread.start()
    # Dask reruns a lost worker's tasks by itself (up to distributed.scheduler.allowed-
    # failures times); with 0, each kill fails the groups the worker hosted, so the
    # controller's own retry, with its backoff, is what brings them back: the worst case.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        result = controller.run()
    thread.join(timeout=10)
    assert not problems, problems
    assert len(killed) == KILLS, f"only {len(killed)} workers were killed before the run ended"
    assert result.steps == STEPS

    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["version/trainer"] for r in rows] == list(range(1, STEPS + 1))
    last = rows[-1]
    print(
        {
            k: last[k]
            for k in (
                "cluster/workers_lost",
                "rollout/failed_groups",
                "rollout/retried_groups",
                "rollout/retry_backoff_s",
                "rollout/duplicate_trajectories_dropped",
            )
        }
    )
    assert last["cluster/workers_lost"] >= KILLS
    assert last["rollout/failed_groups"] >= 1
    # every failed group was queued again after a backoff (0.5 s, then 1 s, ...)
    assert last["rollout/retried_groups"] == last["rollout/failed_groups"]
    assert last["rollout/retry_backoff_s"] >= 0.5 * last["rollout/retried_groups"]
    log = (out / "logs" / "driver.log").read_text()
    assert "rolled out again in 0.5s (backoff: rollout_worker.retry_backoff_s=0.5" in log
    assert "(1 workers lost so far); its tasks run again elsewhere" in log
    # no group given up: each failed group was rolled out again within its tries
    assert all(n <= 3 for n in controller.scheduler.attempts.values())
    # Every trained group whole (8) and once. Second copies of groups (an evaluator
    # killed after its commit, rolled out again) are dropped by the pool before a batch
    # is picked (counted), so every step trains a full batch of what it was handed.
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained) == STEPS * 32
    assert last["pool/delivered_total"] == trained
    assert_pool_record_matches(out, rows)
    assert processes_using(out) == []
