"""``Heartbeats`` on a real LocalCluster: a worker process that is stopped (SIGSTOP)
goes silent after ``silent_s`` and is named by ``QuietNotice``; a worker busy with
GIL-holding Python work keeps heartbeating (no false alarm); a continued one is
heard again. A worker the scheduler removes (here: killed; on several nodes also one
cut off the network past Dask's comm timeout) is gone, and a call waiting on it ends
naming its rank instead of waiting out its deadline."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from nexrl.core.util.dask_workers import workers_of
from nexrl.trainer.errors import TrainerLostError
from nexrl.trainer.heartbeats import Heartbeats, QuietNotice
from nexrl.trainer.pending import PendingCall

DEADLINE_S = 120.0


def _busy(seconds: float) -> int:
    """Pure-Python work: holds the GIL except at the interpreter's switch interval."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(range(1000))
    return n


def _poll(beats: Heartbeats, until: Any) -> list[tuple[int, float]]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        silent = beats.silent()
        if until(silent):
            return silent
        time.sleep(0.2)
    raise AssertionError(f"not reached in {DEADLINE_S}s: {beats.quiet()}")


def test_a_stopped_worker_goes_silent_and_a_busy_one_does_not(local_cluster: Any) -> None:
    client = local_cluster
    addrs = sorted(workers_of(client))
    pids = client.run(os.getpid)
    beats = Heartbeats(client, addrs, silent_s=10.0, every_s=0.2)
    notice = QuietNotice(every_s=10.0)

    # busy for twice silent_s: its event loop still heartbeats
    busy = client.submit(_busy, 20.0, workers=[addrs[0]], pure=False)
    longest = 0.0
    while not busy.done():
        assert beats.silent() == []
        assert notice.line(1, beats) is None
        longest = max(longest, beats.quiet().get(0, 0.0))
        time.sleep(0.2)
    assert busy.result() > 0
    print(f"longest gap between heartbeats of the busy worker: {longest:.2f}s")

    os.kill(pids[addrs[1]], signal.SIGSTOP)
    try:
        silent = _poll(beats, lambda s: bool(s))
        assert [rank for rank, _ in silent] == [1] and silent[0][1] >= 10.0
        line = notice.line(7, beats)
        assert line is not None and line.startswith(
            f"step 7: trainer rank 1 (worker {addrs[1]}) has sent no heartbeat for"
        )
        assert "runtime_monitor.trainer_silent_s=10" in line
        assert notice.line(7, beats) is None  # once per every_s, not on every poll
    finally:
        os.kill(pids[addrs[1]], signal.SIGCONT)
    _poll(beats, lambda s: s == [])  # heard again
    assert client.submit(_busy, 0.1, workers=[addrs[1]], pure=False).result(timeout=60) > 0


def _wait_for(name: str) -> bool:
    """A call that runs until the test sets the Dask event ``name``."""
    from distributed import Event

    return bool(Event(name).wait(DEADLINE_S))


def test_a_worker_that_leaves_is_gone_and_ends_the_call_waiting_on_it(local_cluster: Any) -> None:
    from distributed import Event

    client = local_cluster
    addrs = sorted(workers_of(client))
    beats = Heartbeats(client, addrs, silent_s=0.0, every_s=0.2)
    assert beats.gone() == []
    name = f"release-{time.monotonic_ns()}"
    futures = [client.submit(_wait_for, name, workers=[a], pure=False) for a in addrs]
    # the deadline of a trainer call: far longer than this test may take
    pending = PendingCall("step", futures, time.monotonic() + 10 * DEADLINE_S, beats)
    try:
        assert pending.wait(0.5) is False
        pid = client.run(os.getpid, workers=[addrs[1]])[addrs[1]]
        os.kill(pid, signal.SIGKILL)  # its nanny starts a new worker, at another address
        deadline = time.monotonic() + DEADLINE_S
        with pytest.raises(TrainerLostError) as err:
            while time.monotonic() < deadline:
                pending.wait(0.5)
        assert err.value.ranks == (1,)
        assert str(err.value).startswith(f"trainer step: rank 1's worker {addrs[1]} left the")
        assert "distributed.comm.timeouts.tcp" in str(err.value)
        assert beats.gone() == [1]
    finally:
        Event(name, client=client).set()
        client.cancel(futures)


def _peer_closed(rank: int) -> None:
    """What gloo raises on a rank whose peer went away mid-collective."""
    raise RuntimeError(f"[pair.cc:553] Connection closed by peer [10.77.0.12]:64668 (rank {rank})")


def test_ranks_that_lost_their_peer_wait_for_the_scheduler_to_name_the_one_that_left(
    local_cluster: Any,
) -> None:
    """Both ranks' collective failed ("Connection closed by peer") before the scheduler
    removed rank 1's worker (as when its node's link comes back before Dask's comm
    timeout ran out on a loaded machine): the call names rank 1 as gone, not both ranks
    with gloo's words."""
    import threading

    client = local_cluster
    client.wait_for_workers(2, timeout=DEADLINE_S)  # a test before may have killed one
    addrs = sorted(workers_of(client))
    beats = Heartbeats(client, addrs, silent_s=0.0, every_s=0.2)
    assert beats.gone() == []
    futures = [client.submit(_peer_closed, r, workers=[a], pure=False) for r, a in enumerate(addrs)]
    pid = client.run(os.getpid, workers=[addrs[1]])[addrs[1]]
    pending = PendingCall("save_checkpoint", futures, time.monotonic() + DEADLINE_S, beats)
    for fut in futures:  # both ranks have failed, both workers still listed
        with pytest.raises(RuntimeError):
            fut.result(timeout=DEADLINE_S)
    killer = threading.Timer(2.0, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(TrainerLostError) as err:
            pending.result()
    finally:
        killer.cancel()
    assert err.value.ranks == (1,)
    assert f"rank 1's worker {addrs[1]} left the Dask scheduler" in str(err.value)


def test_the_clients_own_identity_refresh_never_makes_a_live_worker_gone(
    local_cluster: Any,
) -> None:
    """A live worker is never "gone": ``Client.scheduler_info(n_workers=-1)`` returns the
    client's cached identity, which its periodic refresh (asking for no workers) may
    overwrite between the fetch and the return, with ``workers`` empty. A trainer
    probed through it was once named lost at step 721 of a healthy run. Here the
    client refreshes every 2 ms, so that race would be seen in ~3% of the probes."""
    import dask
    from distributed import Client

    local_cluster.wait_for_workers(2, timeout=DEADLINE_S)
    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}):
        client = Client(local_cluster.scheduler.address, timeout=DEADLINE_S)
    try:
        addrs = sorted(workers_of(client))
        assert len(addrs) == 2
        beats = Heartbeats(client, addrs, silent_s=0.0, every_s=0.0)
        for probes in range(3000):
            assert beats.gone() == [], f"a live worker named gone after {probes} probes"
    finally:
        client.close()
