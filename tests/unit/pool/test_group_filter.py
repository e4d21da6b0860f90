"""Dynamic sampling in the pool (``PoolConfig.filter_zero_variance``) on a real zarr store:
groups whose rewards are all equal are never delivered, counted as filtered, and not
delivered again after a restart; a short batch is handed out on request."""

from __future__ import annotations

import dataclasses

import numpy as np

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from tests.unit.pool._data import make_columns, must


def cfg(tmp_path, **kw) -> PoolConfig:
    return PoolConfig(
        store=str(tmp_path / "pool.zarr"),
        group_size=2,
        key_list=["group_id"],
        filter_zero_variance=True,
        **kw,
    )


def group(g: int, rewards: tuple[float, float]):
    """Group ``g`` (trajectories 2g, 2g+1) with the given rewards."""
    cols = make_columns([2 * g, 2 * g + 1], group_size=2)
    return dataclasses.replace(cols, reward=np.asarray(rewards, dtype=np.float32))


def test_zero_variance_groups_are_filtered_and_counted(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=4))
    w = pool.writer()
    w.append(group(0, (1.0, 1.0)))  # all right: dropped
    w.append(group(1, (0.0, 1.0)))  # kept
    w.append(group(2, (0.0, 0.0)))  # all wrong: dropped
    assert pool.get_batch() is None  # one informative group: not a batch of 4 yet
    s = pool.stats()
    assert (s.filtered_groups, s.filtered_trajectories, s.pending) == (2, 4, 2)
    w.append(group(3, (0.5, 0.25)))  # kept
    batch = must(pool.get_batch())
    assert sorted(set(batch.columns.group_id.tolist())) == [1, 3]
    s = pool.stats()
    # every committed trajectory is accounted for: 4 delivered + 4 filtered
    assert (s.committed, s.delivered, s.filtered_trajectories, s.pending) == (8, 4, 4, 0)

    # a new consumer process on the same store does not see the filtered groups again
    again = TrajectoryPool(cfg(tmp_path, batch_size=4))
    w.append(group(4, (1.0, 0.0)))
    w.append(group(5, (1.0, 1.0)))
    w.append(group(6, (0.0, 1.0)))
    batch = must(again.get_batch())
    assert sorted(set(batch.columns.group_id.tolist())) == [4, 6]
    assert again.stats().filtered_groups == 3


def test_short_batch_on_request(tmp_path):
    pool = TrajectoryPool(cfg(tmp_path, batch_size=6))
    w = pool.writer()
    w.append(group(0, (0.0, 1.0)))
    w.append(group(1, (1.0, 1.0)))
    assert pool.get_batch() is None
    batch = must(pool.get_batch(min_trajectories=1))  # the controller's cap was reached
    assert batch.columns.group_id.tolist() == [0, 0]
    assert pool.get_batch(min_trajectories=1) is None  # nothing informative left


def test_filter_off_keeps_every_group(tmp_path):
    pool = TrajectoryPool(
        dataclasses.replace(cfg(tmp_path, batch_size=4), filter_zero_variance=False)
    )
    w = pool.writer()
    w.append(group(0, (1.0, 1.0)))
    w.append(group(1, (0.0, 0.0)))
    batch = must(pool.get_batch())
    assert sorted(set(batch.columns.group_id.tolist())) == [0, 1]
    assert pool.stats().filtered_groups == 0
