"""The record of trained groups (``nexrl.driver.controller.trained.TrainedGroups``): dedup as
before (each group trained from its first commit, later copies dropped), in memory
bounded by its window plus one range per gap, through a checkpoint and back, and
through the scheduler's dedup of real pool batches."""

from __future__ import annotations

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.driver.controller.counters import RunCounters
from nexrl.driver.controller.scheduler import RolloutScheduler
from nexrl.driver.controller.state import ControllerState
from nexrl.driver.controller.trained import TrainedGroups
from tests.unit.pool._data import make_columns, must


def test_first_commit_wins_and_old_groups_fold_into_ranges() -> None:
    t = TrainedGroups(window=3)
    assert t.first(0, "w0/1") and t.first(0, "w0/1")  # more of the same commit
    assert not t.first(0, "w1/7")  # a second commit of group 0
    for g, c in [(1, "w0/2"), (2, "w0/3"), (3, "w0/4")]:
        assert t.first(g, c)
    # four groups, window 3: the oldest (0) left the window for the ranges
    assert t.recent == {1: "w0/2", 2: "w0/3", 3: "w0/4"} and t.ranges == [[0, 1]]
    assert not t.first(0, "w0/1")  # out of the window, any copy is a second one
    for g in (5, 4, 7, 6):  # trained out of order; 6 closes the gap between 5 and 7
        assert t.first(g, f"w0/{g + 1}")
    assert t.recent == {4: "w0/5", 7: "w0/8", 6: "w0/7"}
    assert t.ranges == [[0, 4], [5, 6]]  # 1, 2, 3 merged into [0, 4); 5 beside it
    assert t.first(9, "w0/10")  # 8 is still in flight: a gap
    assert t.ranges == [[0, 6]] and set(t.recent) == {7, 6, 9}
    assert len(t) == 9 and sorted(t) == [0, 1, 2, 3, 4, 5, 6, 7, 9]
    assert 8 not in t and 5 in t and 9 in t
    assert not t.first(5, "w2/1") and t.first(8, "w0/9")


def test_a_checkpoint_round_trip_and_an_old_checkpoints_full_dict() -> None:
    t = TrainedGroups(window=2)
    for g in (0, 1, 3, 4, 5):
        t.first(g, f"w/{g}")
    recent, ranges = t.state()
    assert (recent, ranges) == ({4: "w/4", 5: "w/5"}, [[0, 2], [3, 4]])
    back = TrainedGroups.restored(recent, ranges, window=2)
    assert (back.recent, back.ranges) == (recent, ranges)
    assert not back.first(3, "w/3") and back.first(2, "w/2")
    # a checkpoint from before the ranges: every trained group in ``trained``
    old = TrainedGroups.restored({g: f"w/{g}" for g in range(10)}, window=4)
    assert old.ranges == [[0, 6]] and list(old.recent) == [6, 7, 8, 9] and len(old) == 10
    state = ControllerState(trained=recent, trained_ranges=ranges)
    assert state.trained_ids() == {0, 1, 3, 4, 5}


def test_the_scheduler_drops_second_copies_from_real_pool_batches(tmp_path) -> None:
    """Groups 0-5 committed by one writer, group 1 and group 0 committed again by a
    second (a Dask future that ran twice): group 1's copy while group 1 is in the
    window, group 0's long after. One group per batch. Each group is trained once, from
    its first commit, and the record holds 2 groups and one range."""
    pool = TrajectoryPool(
        PoolConfig(
            store=str(tmp_path / "pool.zarr"), batch_size=2, group_size=2, key_list=["group_id"]
        )
    )
    first, second = pool.writer(), pool.writer()
    counters = RunCounters()
    sched = RolloutScheduler(counters, task_retries=0, max_in_flight=4)
    sched.trained = TrainedGroups(window=2)
    kept: list[int] = []
    for g in range(6):
        first.append(make_columns([2 * g, 2 * g + 1], group_size=2))
        copy = {2: 1, 5: 0}.get(g)
        if copy is not None:
            second.append(make_columns([2 * copy, 2 * copy + 1], group_size=2))
        while (batch := pool.get_batch()) is not None:
            kept += [int(x) for x in must(batch).columns.group_id[sched.first_copy_index(batch)]]
    assert kept == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # no group twice
    assert counters.duplicate_trajectories_dropped == 4  # two groups of 2
    assert list(sched.trained.recent) == [4, 5] and sched.trained.ranges == [[0, 4]]
    assert len(sched.trained) == 6
