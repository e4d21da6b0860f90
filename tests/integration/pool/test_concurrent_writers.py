"""Many writer processes (a Dask LocalCluster with processes, and plain processes)
append to one pool while a reader consumes: every trajectory arrives whole, exactly once."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from tests.integration.pool._workers import write_uids
from tests.unit.pool._data import check_columns

GROUP = 4


def drain(pool: TrajectoryPool, delivered: list[int], deadline: float, expect: int) -> None:
    while len(delivered) < expect and time.monotonic() < deadline:
        batch = pool.get_batch()
        if batch is None:
            time.sleep(0.05)
            continue
        for k in range(batch.num_groups):
            members = batch.columns.group_id[batch.group_index == k]
            assert len(members) == GROUP and len(set(members.tolist())) == 1
        delivered.extend(check_columns(batch.columns))


def test_dask_localcluster_process_writers(local_cluster, tmp_path):
    client = local_cluster  # 2 worker processes (tests/conftest.py)
    store = str(tmp_path / "pool.zarr")
    cfg = PoolConfig(store=store, batch_size=8, group_size=GROUP, key_list=["group_id"])
    pool = TrajectoryPool(cfg)
    n_tasks, per_task = 8, 24
    futures = [
        # uids interleave across tasks so groups are completed by different processes
        client.submit(
            write_uids, store, list(range(t, n_tasks * per_task, n_tasks)), 6, GROUP, pure=False
        )
        for t in range(n_tasks)
    ]
    delivered: list[int] = []
    drain(pool, delivered, time.monotonic() + 120, n_tasks * per_task)
    assert sum(client.gather(futures)) == n_tasks * per_task
    pids = client.run(os.getpid)
    drain(pool, delivered, time.monotonic() + 30, n_tasks * per_task)
    assert sorted(delivered) == list(range(n_tasks * per_task))
    s = pool.stats()
    assert s.pending == 0 and s.delivered == n_tasks * per_task
    assert s.writers == len(set(pids.values())) == 2  # one segment per worker process


def test_four_writer_processes_with_concurrent_reader(tmp_path):
    store = str(tmp_path / "pool.zarr")
    cfg = PoolConfig(store=store, batch_size=16, group_size=GROUP, key_list=["group_id"])
    pool = TrajectoryPool(cfg)
    n = 4 * 160
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=write_uids, args=(store, list(range(p, n, 4)), 5, GROUP))
        for p in range(4)
    ]
    for p in procs:
        p.start()
    delivered: list[int] = []
    drain(pool, delivered, time.monotonic() + 120, n)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(delivered) == list(range(n))
    assert pool.stats().writers == 4
