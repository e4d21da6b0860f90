"""A Dask worker stopped with SIGSTOP mid-task: dropped after ``worker_silent_s``, its
task runs on the other worker, and on a local cluster a fresh worker takes its place.

A real ``LocalCluster`` of two worker processes with nannies (as ``cluster.type:
local`` starts them); the stopped worker is a real process under ``SIGSTOP``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

from distributed import Client, LocalCluster

from nexrl.driver.controller.silent_workers import NoWorkerLeft, SilentWorkers

logging.getLogger("distributed").setLevel(logging.CRITICAL)


def where_it_ran(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _pids(client: Client) -> dict[str, int]:
    return {str(a): int(p) for a, p in client.run(os.getpid).items()}


def test_a_stopped_worker_is_dropped_its_task_moves_and_a_fresh_one_starts() -> None:
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as lc,
        Client(lc) as client,
    ):
        pids = _pids(client)
        stopped, other = sorted(pids)
        future = client.submit(where_it_ran, 4.0, workers=[stopped], allow_other_workers=True)
        while not client.processing()[stopped]:
            time.sleep(0.05)
        os.kill(pids[stopped], signal.SIGSTOP)
        try:
            excluded = {stopped}
            watch = SilentWorkers(client, 3.0, lambda: excluded, kill_local=True, every_s=0.2)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5.0:  # a trainer rank's worker: not ours to drop
                assert watch.check() == []
                time.sleep(0.2)
            excluded = set()
            lines: list[str] = []
            while not lines and time.monotonic() - t0 < 20.0:
                lines = watch.check()
                time.sleep(0.2)
            dropped_after = time.monotonic() - t0
        finally:
            with contextlib.suppress(ProcessLookupError):  # killed, as it should be
                os.kill(pids[stopped], signal.SIGCONT)
        (line,) = lines
        assert line.startswith(f"Dask worker {stopped} (pid {pids[stopped]} on 127.0.0.1) sent ")
        assert "dropped, its 1 running tasks go to the other workers" in line
        assert "killed; its nanny starts a fresh worker" in line
        assert "runtime_monitor.worker_silent_s=3" in line
        assert dropped_after < 12.0  # 3 s of silence, not Dask's 5-minute worker-ttl
        assert future.result(timeout=30) == pids[other]  # it ran again on the other one
        assert watch.dropped == [stopped]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the nanny's fresh worker joins
            now = _pids(client)
            if len(now) == 2 and stopped not in now:
                break
            time.sleep(0.2)
        now = _pids(client)
        assert len(now) == 2 and pids[stopped] not in now.values()
        assert client.submit(where_it_ran, 0.0, workers=[a for a in now if a != other]).result(
            timeout=30
        ) not in (pids[stopped], pids[other])


def test_with_no_worker_left_to_run_rollouts_the_run_is_told_in_one_line() -> None:
    """Off a local cluster (no kill, no replacement): while another worker offers the
    rollout tasks' resources nothing is said; once every such worker was dropped and
    none joined for ``worker_silent_s``, ``NoWorkerLeft`` names them."""
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            resources={"CPU": 1},
        ) as lc,
        Client(lc) as client,
    ):
        pids = _pids(client)
        first, second = sorted(pids)
        watch = SilentWorkers(client, 2.0, set, kill_local=False, every_s=0.2)
        os.kill(pids[first], signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            while not watch.dropped and time.monotonic() - t0 < 20.0:
                watch.check()
                watch.none_left({"CPU": 1})  # the second one can run them: silent
                time.sleep(0.2)
            assert watch.dropped == [first]
            for _ in range(20):  # 4 s: still the second worker
                watch.check()
                watch.none_left({"CPU": 1})
                time.sleep(0.2)
            os.kill(pids[second], signal.SIGSTOP)
            raised: NoWorkerLeft | None = None
            t1 = time.monotonic()
            while raised is None and time.monotonic() - t1 < 30.0:
                watch.check()
                try:
                    watch.none_left({"CPU": 1})
                except NoWorkerLeft as exc:
                    raised = exc
                time.sleep(0.2)
            waited = time.monotonic() - t1
        finally:
            for pid in pids.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        assert raised is not None, "no NoWorkerLeft with every worker dropped"
        assert watch.dropped == [first, second]
        assert str(raised).startswith("no Dask worker is left to run rollouts (resources CPU=1)")
        assert f"2 dropped as silent ({first}, {second})" in str(raised)
        assert "runtime_monitor.worker_silent_s" in str(raised)
        assert 2.0 <= waited < 15.0  # silent 2 s, then none for 2 s
