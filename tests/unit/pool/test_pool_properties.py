"""Hypothesis: whatever the interleaving of writes, batches and restarts, every
trajectory is delivered at most once, batches hold whole groups, and a final drain
delivers exactly the complete groups."""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexrl.core.pool import PoolWriter, TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from tests.unit.pool._data import check_columns, make_columns

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2), st.integers(1, 7)),
        st.tuples(st.just("get"), st.just(0), st.just(0)),
        st.tuples(st.just("restart"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    group_size=st.integers(1, 3),
    groups_per_batch=st.integers(1, 3),
    grouped=st.booleans(),
    n_groups=st.integers(1, 8),
    perm_seed=st.randoms(use_true_random=False),
    script=ops,
    row_chunk=st.sampled_from([1, 2, 1024]),  # small: big commits are indexed in parts
)
def test_exactly_once_under_restarts(
    group_size, groups_per_batch, grouped, n_groups, perm_seed, script, row_chunk
):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = PoolConfig(
            store=f"{tmp}/pool.zarr",
            batch_size=group_size * groups_per_batch,
            group_size=group_size,
            key_list=["group_id"] if grouped else [],
            chunking={"row_chunk": row_chunk},
        )
        uids = list(range(n_groups * group_size))
        perm_seed.shuffle(uids)
        writers = [PoolWriter.from_config(cfg) for _ in range(3)]
        pool = TrajectoryPool(cfg)
        written: list[int] = []
        delivered: list[int] = []

        def take(batch) -> None:
            got = check_columns(batch.columns)
            if grouped:
                for k in range(batch.num_groups):
                    members = batch.columns.group_id[batch.group_index == k]
                    assert len(set(members.tolist())) == 1 and len(members) == group_size
            delivered.extend(got)

        for op, who, n in script:
            if op == "write" and len(written) < len(uids):
                block = uids[len(written) : len(written) + n]
                writers[who].append(make_columns(block, group_size=group_size))
                written.extend(block)
            elif op == "get":
                batch = pool.get_batch()
                if batch is not None:
                    assert len(batch) == cfg.batch_size
                    take(batch)
            elif op == "restart":
                pool = TrajectoryPool(cfg)
        assert len(delivered) == len(set(delivered))  # never twice
        drain = TrajectoryPool(dataclasses.replace(cfg, batch_readiness="loaded_batch_finished"))
        while (batch := drain.get_batch(loaded_batch_finished=True)) is not None:
            take(batch)
        assert len(delivered) == len(set(delivered))
        size = group_size if grouped else 1
        counts = Counter(u // size for u in written)
        complete = {u for u in written if counts[u // size] == size}
        assert set(delivered) == complete  # nothing lost, nothing extra
        assert drain.stats().pending == len(written) - len(complete)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    group_size=st.integers(2, 3),
    action=st.sampled_from(["release", "drop"]),
    perm_seed=st.randoms(use_true_random=False),
    script=st.lists(
        st.one_of(
            st.tuples(st.just("write"), st.integers(1, 4)),
            st.tuples(st.just("get"), st.just(0)),
            st.tuples(st.just("tick"), st.integers(1, 15)),
            st.tuples(st.just("restart"), st.just(0)),
        ),
        min_size=1,
        max_size=16,
    ),
)
def test_timeouts_deliver_or_drop_each_trajectory_once(group_size, action, perm_seed, script):
    with tempfile.TemporaryDirectory() as tmp:
        clock = _Clock()
        cfg = PoolConfig(
            store=f"{tmp}/pool.zarr",
            batch_size=group_size,
            group_size=group_size,
            key_list=["group_id"],
            group_timeout_s=10,
            group_timeout_action=action,
        )
        uids = list(range(6 * group_size))
        perm_seed.shuffle(uids)
        writer = PoolWriter(cfg.store, clock=clock)
        pool = TrajectoryPool(cfg, clock=clock)
        written: list[int] = []
        delivered: list[int] = []
        for op, k in script:
            if op == "write" and len(written) < len(uids):
                block = uids[len(written) : len(written) + k]
                writer.append(make_columns(block, group_size=group_size))
                written.extend(block)
            elif op == "get":
                if (batch := pool.get_batch()) is not None:
                    assert len(batch) <= group_size
                    delivered.extend(check_columns(batch.columns))
            elif op == "tick":
                clock.t += k
            else:
                pool = TrajectoryPool(cfg, clock=clock)
        clock.t += 1000  # every open group times out
        drain = TrajectoryPool(
            dataclasses.replace(cfg, batch_readiness="loaded_batch_finished"), clock=clock
        )
        while (batch := drain.get_batch(loaded_batch_finished=True)) is not None:
            delivered.extend(check_columns(batch.columns))
        assert len(delivered) == len(set(delivered))
        stats = drain.stats()
        assert stats.pending == 0
        assert len(delivered) + stats.timeout_dropped_trajectories == len(written)
        if action == "release":
            assert sorted(delivered) == sorted(written)
        ds = drain.to_xarray() if written else None
        if ds is not None:
            uid = ds.metric_uid.values.astype(int)
            assert set(uid[ds.status.values == 1].tolist()) == set(delivered)
            assert int((ds.status.values == 2).sum()) == stats.timeout_dropped_trajectories
