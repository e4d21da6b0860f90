"""Grouping rules, including hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nexrl.core.pool.grouping import GroupIndex


def test_ungrouped_every_trajectory_is_ready():
    g = GroupIndex(4, grouped=False)
    for r in range(5):
        g.add(r, None, 0.0)
    assert g.ready_trajectories == 5 and g.open_groups == 0
    taken, _ = g.take(3)
    assert [t.refs for t in taken] == [[0], [1], [2]]


def test_groups_fill_in_arrival_order_and_overflow_starts_new_group():
    g = GroupIndex(2, grouped=True)
    for r, k in enumerate(["a", "b", "a", "a", "b", "a"]):
        g.add(r, k, float(r))
    taken, _ = g.take(None)
    assert [t.refs for t in taken] == [[0, 2], [1, 4], [3, 5]]


def test_take_whole_groups_skipping_those_that_do_not_fit():
    g = GroupIndex(4, grouped=True)
    for r in range(4):
        g.add(r, "full", 0.0)
    for r in range(4, 7):
        g.add(r, "short", 0.0)
    (short,) = g.expire(horizon=100.0, timeout=10.0)
    g.release(short)
    for r in range(7, 11):
        g.add(r, "next", 1.0)
    for r in range(11, 12):
        g.add(r, "tiny", 2.0)
    (tiny,) = g.expire(horizon=100.0, timeout=10.0)
    g.release(tiny)
    taken, _ = g.take(8)
    # oldest first: full(4) + short(3); "next"(4) does not fit and waits, first in
    # line; the later "tiny"(1) fills the batch to exactly 8
    assert [t.key for t in taken] == ["full", "short", "tiny"]
    assert g.ready_trajectories == 4
    taken, _ = g.take(8)
    assert [t.key for t in taken] == ["next"]


def test_first_group_larger_than_limit_is_taken_alone_and_reject():
    g = GroupIndex(3, grouped=True)
    for r in range(6):
        g.add(r, r // 3, 0.0)
    taken, rejected = g.take(2, reject=lambda grp: grp.key == 0)
    assert [t.key for t in rejected] == [0] and [t.key for t in taken] == [1]


def test_expire_uses_first_arrival():
    g = GroupIndex(3, grouped=True)
    g.add(0, "a", 10.0)
    g.add(1, "b", 20.0)
    g.add(2, "a", 25.0)
    assert [x.key for x in g.expire(horizon=29.0, timeout=20.0)] == []
    assert [x.key for x in g.expire(horizon=31.0, timeout=20.0)] == ["a"]
    assert g.open_trajectories == 1


@settings(max_examples=200, deadline=None, database=None)
@given(
    keys=st.lists(st.integers(0, 6), min_size=0, max_size=60),
    group_size=st.integers(1, 5),
    grouped=st.booleans(),
    limits=st.lists(st.one_of(st.none(), st.integers(1, 12)), min_size=1, max_size=8),
)
def test_property_groups_are_whole_and_each_ref_appears_once(keys, group_size, grouped, limits):
    g = GroupIndex(group_size, grouped=grouped)
    for ref, k in enumerate(keys):
        g.add(ref, k, float(ref))
    seen: list[int] = []
    size = group_size if grouped else 1
    for limit in limits:
        before = g.ready_trajectories
        taken, _ = g.take(limit)
        got = sum(len(t) for t in taken)
        assert g.ready_trajectories == before - got
        if limit is not None and len(taken) > 1:
            assert got <= limit
        for t in taken:
            assert len(t) == size  # never released here: always full groups
            assert len({keys[r] for r in t.refs}) == 1 or not grouped
            seen.extend(t.refs)
    rest, _ = g.take(None)
    seen.extend(r for t in rest for r in t.refs)
    expired = g.expire(horizon=1e9, timeout=0.0)
    leftover = [r for t in expired for r in t.refs]
    assert sorted(seen + leftover) == list(range(len(keys)))  # each ref exactly once
    # exactly the full groups were delivered: per key, floor(count / size) groups
    from collections import Counter

    counts = Counter(keys) if grouped else Counter(range(len(keys)))
    assert len(seen) == sum((c // size) * size for c in counts.values())
