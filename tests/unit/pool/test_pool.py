"""TrajectoryPool behaviour on real zarr stores: grouping, readiness, timeouts,
staleness, weight-sync tags, exactly-once with restarts, xarray view."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nexrl.core.pool import (
    ConsumerConflictError,
    PoolBatch,
    PoolConfigError,
    PoolWriter,
    TrajectoryPool,
    get_writer,
)
from nexrl.core.pool.config import PoolConfig
from tests.unit.pool._data import check_columns, make_columns, must


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def cfg(tmp_path, **kw) -> PoolConfig:
    return PoolConfig(store=str(tmp_path / "pool.zarr"), **kw)


def uids_of(batch: PoolBatch | None) -> list[int]:
    return check_columns(must(batch).columns)


def test_no_grouping_batches_of_batch_size(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=4))
    w = pool.writer()
    for u in range(10):
        w.append(make_columns([u]))
    assert pool.stats().pending == 10
    b1, b2 = must(pool.get_batch()), must(pool.get_batch())
    assert uids_of(b1) == [0, 1, 2, 3] and uids_of(b2) == [4, 5, 6, 7]
    assert b1.step == 1 and b2.step == 2 and b1.num_groups == 4
    assert pool.get_batch() is None
    s = pool.stats()
    assert (s.committed, s.pending, s.delivered, s.steps) == (10, 2, 8, 2)


def test_group_by_one_key_across_writers(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=6, group_size=3, key_list=["group_id"]))
    w1, w2 = pool.writer(), pool.writer()
    # members of each group arrive from different writers, out of order
    w1.append(make_columns([0, 3, 6], group_size=3))
    w2.append(make_columns([1, 4, 7], group_size=3))
    assert pool.get_batch() is None  # no group complete yet
    w1.append(make_columns([2, 5], group_size=3))
    batch = must(pool.get_batch())
    assert batch is not None and len(batch) == 6
    gids = batch.columns.group_id
    assert [sorted(gids[batch.group_index == k].tolist()) for k in range(2)] == [[0] * 3, [1] * 3]
    check_columns(batch.columns)
    assert pool.stats().open_groups == 1  # group 2 waits for its third member
    w2.append(make_columns([8], group_size=3))
    w1.append(make_columns(range(9, 12), group_size=3))
    assert sorted(uids_of(pool.get_batch())) == list(range(6, 12))


def test_group_by_several_keys_and_meta_path(tmp_path):
    c = cfg(tmp_path, batch_size=2, group_size=2, key_list=["group_id", "policy_version"])
    pool = TrajectoryPool(c)
    w = pool.writer()
    w.append(make_columns([0, 1], group_size=2, version=[0, 1]))  # same group, other version
    assert pool.get_batch() is None
    w.append(make_columns([0, 1], group_size=2, version=[1, 0]))
    b1, b2 = must(pool.get_batch()), must(pool.get_batch())
    assert {tuple(b.columns.policy_version) for b in (b1, b2)} == {(0, 0), (1, 1)}
    # a JSON path into extra_info: tag is t0/t1/t2 by group
    pool2 = TrajectoryPool(dataclasses.replace(c, consumer="by_tag", key_list=["extra_info.tag"]))
    pool2.writer().append(make_columns(range(20, 26)))  # group ids 20..25 -> tags 2,0,1,2,0,1
    tags = []
    while (b := pool2.get_batch()) is not None:
        assert len(set(b.columns.group_id % 3)) == 1
        tags.append(int(b.columns.group_id[0] % 3))
    # the first 4 trajectories (group 0, tag t0) are grouped by tag too
    assert sorted(tags) == [0, 0, 0, 1, 2]


def test_loaded_batch_finished_and_both(tmp_path):
    pool = TrajectoryPool(
        cfg(
            tmp_path,
            batch_size=4,
            group_size=2,
            key_list=["group_id"],
            batch_readiness="loaded_batch_finished",
        )
    )
    w = pool.writer()
    w.append(make_columns(range(7), group_size=2))
    assert pool.get_batch() is None  # the controller has not said the loaded batch finished
    b = must(pool.get_batch(loaded_batch_finished=True))
    assert sorted(uids_of(b)) == list(range(6))  # every complete group, more than batch_size
    assert pool.get_batch(loaded_batch_finished=True) is None  # uid 6's group is open
    both = TrajectoryPool(
        cfg(
            tmp_path,
            batch_size=4,
            group_size=2,
            key_list=["group_id"],
            batch_readiness="both",
            consumer="both",
        )
    )
    assert both.get_batch() is None
    assert len(must(both.get_batch(loaded_batch_finished=True))) == 6
    w.append(make_columns([7], group_size=2))  # completes group 3: 2 ready < batch_size
    assert both.get_batch(loaded_batch_finished=True) is None
    w.append(make_columns([8, 9], group_size=2))
    assert both.get_batch() is None  # enough, but the loaded batch is not finished
    assert sorted(uids_of(both.get_batch(loaded_batch_finished=True))) == list(range(6, 10))


def test_group_timeout_release_counts_and_short_batch(tmp_path):
    clock = Clock()
    pool = TrajectoryPool(
        cfg(tmp_path, batch_size=4, group_size=2, key_list=["group_id"], group_timeout_s=60),
        clock=clock,
    )
    w = PoolWriter(pool.url, clock=clock)
    clock.t = 0
    w.append(make_columns([0, 1, 2], group_size=2))  # group 0 full, group 1 has 1 of 2
    clock.t = 100
    w.append(make_columns([4, 5], group_size=2))  # group 2 full
    clock.t = 150
    b = must(pool.get_batch())
    assert sorted(uids_of(b)) == [0, 1, 4, 5] and b.released_groups == 0
    s = pool.stats()
    assert s.ready == 1 and s.open_groups == 0  # group 1 released, waiting for room
    clock.t = 160
    w.append(make_columns([6, 7, 8, 9], group_size=2))
    b = must(pool.get_batch())
    assert sorted(uids_of(b)) == [2, 6, 7] and b.released_groups == 1
    assert pool.stats().released_groups == 1 and pool.get_batch() is None


def test_group_timeout_drop_is_durable_and_counted(tmp_path):
    clock = Clock()
    c = cfg(
        tmp_path,
        batch_size=2,
        group_size=2,
        key_list=["group_id"],
        group_timeout_s=60,
        group_timeout_action="drop",
    )
    pool = TrajectoryPool(c, clock=clock)
    w = PoolWriter(pool.url, clock=clock)
    clock.t = 0
    w.append(make_columns([0], group_size=2))
    clock.t = 30
    assert pool.get_batch() is None and pool.stats().open_groups == 1
    clock.t = 61
    assert pool.get_batch() is None
    s = pool.stats()
    assert (s.timeout_dropped_groups, s.timeout_dropped_trajectories, s.pending) == (1, 1, 0)
    # a restarted pool does not resurrect the dropped trajectory; the late member
    # starts a new group with that key
    again = TrajectoryPool(c, clock=clock)
    w.append(make_columns([1], group_size=2))
    assert again.get_batch() is None and again.stats().open_trajectories == 1
    assert again.stats().timeout_dropped_groups == 1


def test_timeout_waits_for_unindexed_backlog(tmp_path):
    """A group is not timed out while commits from within its timeout window are unindexed."""
    clock = Clock()
    c = cfg(
        tmp_path,
        batch_size=2,
        group_size=2,
        key_list=["group_id"],
        group_timeout_s=10,
        group_timeout_action="drop",
    )
    w = PoolWriter(c.store, clock=clock)
    clock.t = 0
    w.append(make_columns([0, 2, 3], group_size=2))  # group 0 half, group 1 full
    clock.t = 5
    w.append(make_columns([1], group_size=2))  # completes group 0 within its timeout
    clock.t = 1000  # the reader starts much later, with a backlog
    pool = TrajectoryPool(c, clock=clock)
    got = [sorted(uids_of(pool.get_batch())) for _ in range(2)]
    assert sorted(got) == [[0, 1], [2, 3]] and pool.stats().timeout_dropped_groups == 0


def test_staleness_filter_and_lag_metrics(tmp_path):
    pool = TrajectoryPool(
        cfg(tmp_path, batch_size=4, group_size=2, key_list=["group_id"], max_staleness=1)
    )
    w = pool.writer()
    w.append(make_columns([0, 1], group_size=2, version=[3, 4]))  # lag 2 with current 5
    w.append(make_columns([2, 3, 4, 5], group_size=2, version=[4, 4, 5, 5]))
    b = must(pool.get_batch(current_version=5))
    assert sorted(uids_of(b)) == [2, 3, 4, 5]
    assert b.max_version_lag == 1 and b.mean_version_lag == 0.5
    m = b.metrics()
    assert "pool/max_version_lag" not in m  # logged once, as the controller's version/lag_max
    s = pool.stats()
    assert (s.stale_dropped_groups, s.stale_dropped_trajectories) == (1, 2)
    # without a filter the lag is only reported; the version comes from end_weight_sync
    nofilter = TrajectoryPool(cfg(tmp_path, batch_size=2, consumer="report"))
    nofilter.end_weight_sync(7)
    b = must(nofilter.get_batch())
    assert b.current_version == 7 and b.max_version_lag == 4


def test_weight_sync_tags_and_keeps(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=3))
    w = pool.writer()
    w.append(make_columns([0]))
    pool.begin_weight_sync(target_version=1)
    assert pool.stats().weight_sync
    w.append(make_columns([1, 2]))  # committed during the sync: kept and tagged
    pool.end_weight_sync(1)
    b = must(pool.get_batch())
    assert uids_of(b) == [0, 1, 2] and b.weight_sync_trajectories == 2
    ds = pool.to_xarray()
    assert ds.weight_sync.values.tolist() == [False, True, True]
    assert pool.stats().current_version == 1 and not pool.stats().weight_sync


def test_restart_resumes_exactly_including_partly_consumed_commits(tmp_path):
    c = cfg(tmp_path, batch_size=4, group_size=2, key_list=["group_id"])
    w = PoolWriter(c.store)
    w.append(make_columns(range(10), group_size=2))  # one commit, consumed over restarts
    w.append(make_columns(range(10, 20), group_size=2))
    delivered: list[int] = []
    for _ in range(5):
        pool = TrajectoryPool(c)  # a new process each time
        delivered += uids_of(pool.get_batch())
    assert sorted(delivered) == list(range(20)) and len(delivered) == 20
    assert TrajectoryPool(c).stats().pending == 0


def test_state_dict_rewinds_to_checkpoint(tmp_path):
    c = cfg(tmp_path, batch_size=2)
    pool = TrajectoryPool(c)
    pool.writer().append(make_columns(range(8)))
    first = uids_of(pool.get_batch())
    ckpt = pool.state_dict()
    lost = uids_of(pool.get_batch()) + uids_of(pool.get_batch())  # trainer crashes after these
    restarted = TrajectoryPool(c)
    restarted.load_state_dict(ckpt)
    again = uids_of(restarted.get_batch()) + uids_of(restarted.get_batch())
    assert sorted(again) == sorted(lost) and not set(first) & set(again)
    assert restarted.cursor.steps == 3
    assert sorted(uids_of(restarted.get_batch())) == [6, 7]
    ds = restarted.to_xarray()  # the delivery log follows the rewind
    assert sorted(ds.step.values.tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]
    with pytest.raises(ValueError):
        restarted.load_state_dict({"generation": 10**6})


def test_rewinds_to_any_generation_replay_correctly(tmp_path):
    c = cfg(tmp_path, batch_size=1)
    pool = TrajectoryPool(c)
    pool.writer().append(make_columns(range(6)))
    states = [pool.state_dict()]
    for _ in range(3):
        uids_of(pool.get_batch())
        states.append(pool.state_dict())  # after 0, 1, 2 batches
    pool.load_state_dict(states[1])  # back to "uid 0 trained"
    assert uids_of(pool.get_batch()) == [1]
    pool.load_state_dict(states[2])  # forward again to a generation of the first branch
    assert uids_of(pool.get_batch()) == [2]
    ds = pool.to_xarray()
    assert ds.step.values.tolist() == [1, 2, 3, -1, -1, -1]
    assert pool.stats().delivered == 3


def test_two_processes_on_one_consumer_name_conflict(tmp_path):
    c = cfg(tmp_path, batch_size=1)
    a, b = TrajectoryPool(c), TrajectoryPool(c)
    a.writer().append(make_columns(range(4)))
    got = uids_of(a.get_batch())
    with pytest.raises(ConsumerConflictError):
        b.get_batch()
    # b rebuilt itself from the durable cursor: it continues without a duplicate
    got += uids_of(b.get_batch())
    assert got == [0, 1]


def test_independent_consumers_each_get_everything(tmp_path):
    c = cfg(tmp_path, batch_size=3)
    trainer, audit = TrajectoryPool(c), TrajectoryPool(dataclasses.replace(c, consumer="audit"))
    trainer.writer().append(make_columns(range(3)))
    assert uids_of(trainer.get_batch()) == uids_of(audit.get_batch()) == [0, 1, 2]


def test_config_errors_are_all_reported(tmp_path):
    bad = PoolConfig(
        store="${output_dir}/pool.zarr",
        batch_size=5,
        group_size=2,
        key_list=["uid"],
        consumer="a/b",
    )
    with pytest.raises(PoolConfigError) as err:
        TrajectoryPool(bad)
    text = str(err.value)
    for part in ("key_list", "multiple of group_size", "consumer", "interpolation"):
        assert part in text
    assert len(err.value.problems) == 4


def test_fsspec_url_store(tmp_path):
    c = PoolConfig(
        store="memory://pooltest/pool.zarr", batch_size=2, group_size=2, key_list=["group_id"]
    )
    pool = TrajectoryPool(c)
    get_writer(c).append(make_columns(range(4), group_size=2))
    assert sorted(uids_of(pool.get_batch()) + uids_of(pool.get_batch())) == [0, 1, 2, 3]
    assert TrajectoryPool(c).get_batch() is None  # cursor durable in the fsspec store


def test_batch_to_trajectories_and_ids(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=2))
    w = pool.writer()
    w.append(make_columns([3, 4]))
    b = must(pool.get_batch())
    trajs = b.trajectories()
    assert [t.extra_info["uid"] for t in trajs] == [3, 4]
    assert trajs[0].metrics == {"uid": 3.0, "rlen": float(len(trajs[0].response_ids))}
    assert [i[1:] for i in b.ids] == [(0, 0), (0, 1)] and b.ids[0][0] == w.writer_id


def test_to_xarray_view(tmp_path):
    clock = Clock()
    c = cfg(
        tmp_path,
        batch_size=2,
        group_size=2,
        key_list=["group_id"],
        group_timeout_s=1,
        group_timeout_action="drop",
    )
    pool = TrajectoryPool(c, clock=clock)
    w1, w2 = PoolWriter(c.store, clock=clock), PoolWriter(c.store, clock=clock)
    clock.t = 10
    w1.append(make_columns(range(4), group_size=2, version=2))
    w2.append(make_columns([4], group_size=2, version=3, metrics=False))
    clock.t = 20
    must(pool.get_batch())
    must(pool.get_batch())
    assert pool.get_batch() is None  # uid 4's group (first seen at t=10) timed out: dropped
    ds = pool.to_xarray()
    assert ds.sizes["trajectory"] == 5
    assert set(ds.data_vars) >= {
        "group_id",
        "run_id",
        "policy_version",
        "reward",
        "prompt_len",
        "response_len",
        "step",
        "status",
        "metric_uid",
        "metric_rlen",
        "weight_sync",
        "committed_at",
    }
    ds = ds.isel(trajectory=np.argsort(ds.reward.values))  # reward = uid / 10
    np.testing.assert_array_equal(ds.metric_uid.values[:4], [0, 1, 2, 3])
    assert np.isnan(ds.metric_uid.values[4])
    np.testing.assert_array_equal(ds.policy_version.values, [2, 2, 2, 2, 3])
    np.testing.assert_allclose(ds.reward.values, [0.0, 0.1, 0.2, 0.3, 0.4], rtol=1e-6)
    assert ds.step.values.tolist() == [1, 1, 2, 2, -1]
    assert ds.status.values.tolist() == [1, 1, 1, 1, 2]
    assert ds.reward.chunks is not None  # lazy (dask) variables
    assert ds.response_len.values.tolist() == [1 + (u * 13) % 50 for u in range(5)]


def test_read_pool_numbers_steps_from_one_and_reads_pools_that_counted_from_zero(tmp_path):
    import json

    from nexrl.core.pool import PoolStoreError, read_pool

    c = cfg(tmp_path, batch_size=2)
    pool = TrajectoryPool(c)
    pool.writer().append(make_columns(range(5)))
    assert [must(pool.get_batch()).step for _ in range(2)] == [1, 2]  # metrics.jsonl's steps
    ds = read_pool(c.store)
    assert ds.step.values.tolist() == [1, 1, 2, 2, -1]
    assert pool.stats().delivered == 4  # reading moved no cursor
    # A pool written before steps counted from 1 has no "step_base" in its events.
    for path in (tmp_path / "pool.zarr" / "_consumers" / "trainer").glob("*.json"):
        state = json.loads(path.read_text())
        if state.get("last", {}).pop("step_base", None) == 1:
            state["last"]["step"] -= 1
            path.write_text(json.dumps(state))
    assert read_pool(c.store).step.values.tolist() == [1, 1, 2, 2, -1]
    with pytest.raises(PoolStoreError, match="no trajectory pool there"):
        read_pool(str(tmp_path / "elsewhere"))
