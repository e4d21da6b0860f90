"""A Dask task that runs twice (its worker died after the commit, before the result got
back) commits its groups twice, from another worker process. The pool delivers each group
once and fills every batch with distinct groups; the second copies are recorded dropped."""

from __future__ import annotations

import numpy as np

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.util.dask_workers import workers_of
from tests.integration.pool._workers import write_uids
from tests.unit.pool._data import check_columns, must

GROUP, BATCH = 4, 16  # 4 groups per batch; each task commits 4 whole groups at once


def commit_groups(client, worker: str, store: str, groups: range) -> None:
    uids = list(range(groups.start * GROUP, groups.stop * GROUP))
    client.submit(write_uids, store, uids, BATCH, GROUP, workers=[worker], pure=False).result()


def drain(pool: TrajectoryPool) -> list[tuple[int, list[int]]]:
    """(step, group ids) of every batch ready now; each batch is full and distinct."""
    out = []
    while (batch := pool.get_batch()) is not None:
        gids = batch.columns.group_id
        assert len(batch) == BATCH and len(set(gids.tolist())) == BATCH // GROUP
        check_columns(batch.columns)
        out.append((batch.step, sorted(set(gids.tolist()))))
    return out


def test_groups_committed_twice_are_delivered_once_in_full_batches(local_cluster, tmp_path):
    client = local_cluster
    first, second = sorted(workers_of(client))
    store = str(tmp_path / "pool.zarr")
    cfg = PoolConfig(
        store=store, batch_size=BATCH, group_size=GROUP, key_list=["group_id"], dedup_groups=True
    )
    pool = TrajectoryPool(cfg)
    commit_groups(client, first, store, range(0, 8))
    first_batch = must(pool.get_batch())
    assert (first_batch.step, sorted(set(first_batch.columns.group_id.tolist()))) == (
        1,
        [0, 1, 2, 3],
    )
    after_step_1 = {"consumer": "trainer", "generation": 1}
    # the re-runs on the other worker: groups 0-3 were trained already, 4-7 are pending
    commit_groups(client, second, store, range(0, 8))
    commit_groups(client, second, store, range(8, 12))
    expected = [(2, [4, 5, 6, 7]), (3, [8, 9, 10, 11])]
    assert drain(pool) == expected
    s = pool.stats()
    assert (s.steps, s.delivered, s.pending) == (3, 48, 0)
    assert (s.duplicate_dropped_groups, s.duplicate_dropped_trajectories) == (8, 32)

    # the pool's record: every step took BATCH trajectories, each group once, copies dropped
    ds = pool.to_xarray()
    step, status, gid = ds["step"].values, ds["status"].values, ds["group_id"].values
    assert np.bincount(step[step > 0]).tolist() == [0, BATCH, BATCH, BATCH]
    assert sorted(gid[status == 1].tolist()) == sorted(np.repeat(np.arange(12), GROUP).tolist())
    assert (status == 2).sum() == 32 and (status == 0).sum() == 0

    # a trainer resumed from its step-1 checkpoint gets the same batches again
    resumed = TrajectoryPool(cfg)
    resumed.load_state_dict(after_step_1)
    assert drain(resumed) == expected
    # a third copy committed after everything was trained is dropped too
    commit_groups(client, first, store, range(4, 8))
    assert drain(resumed) == [] and resumed.stats().pending == 0
