"""``RolloutScheduler``'s retry backoff: a failed group goes out again after
``retry_backoff_s * 2 ** (attempt - 1)`` seconds (at most ``retry_backoff_max_s``),
new groups go out meanwhile (not in sync mode), and the delays are counted."""

from __future__ import annotations

from typing import Any

import pytest

from nexrl.driver.controller.counters import RunCounters
from nexrl.driver.controller.dispatch import InFlight, TaskFailure
from nexrl.driver.controller.scheduler import RolloutScheduler


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Dispatcher:
    """What ``top_up`` asks of a dispatcher: the groups running, and submit_groups."""

    def __init__(self) -> None:
        self.submitted: list[int] = []

    def running(self, tag: str | None = None) -> list[Any]:
        return []  # every submitted group has already finished or failed in these tests

    def submit_groups(self, groups: list[list[dict[str, Any]]]) -> None:
        self.submitted += [int(items[0]["group_id"]) for items in groups]


class Loader:
    def __init__(self, n: int) -> None:
        self.groups = [[{"group_id": g, "run_id": 0}] for g in range(n)]

    def next_batch(self, k: int) -> list[list[dict[str, Any]]]:
        out, self.groups = self.groups[:k], self.groups[k:]
        return out


def _fail(sched: RolloutScheduler, gid: int) -> None:
    group = InFlight([{"group_id": gid, "run_id": 0}], "train")
    sched.record_failure(
        group, TaskFailure("rollout", f"rollout-g{gid}", gid, "train", "KilledWorker")
    )


def _scheduler(clock: Clock, counters: RunCounters) -> RolloutScheduler:
    return RolloutScheduler(
        counters,
        task_retries=3,
        max_in_flight=8,
        target=1,
        retry_backoff_s=1.0,
        retry_backoff_max_s=3.0,
        clock=clock,
    )


def test_the_backoff_doubles_per_failure_up_to_its_cap() -> None:
    sched = _scheduler(Clock(), RunCounters())
    assert [sched.backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 3.0, 3.0]
    sched.retry_backoff_s = 0.0
    assert sched.backoff(5) == 0.0  # 0 = retry at once


def test_a_failed_group_waits_its_backoff_while_new_groups_go_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, counters = Clock(), RunCounters()
    sched, loader = _scheduler(clock, counters), Loader(10)
    dispatcher: Any = Dispatcher()  # stands in for RolloutDispatcher (running, submit_groups)
    _fail(sched, 7)
    assert "group 7 failed (attempt 1 of 4); rolled out again in 1.0s" in caplog.text
    sched.top_up(dispatcher, loader, lambda: 0)
    assert dispatcher.submitted == [0]  # group 7 still waits: a new group went out
    clock.now += 1.0
    sched.top_up(dispatcher, loader, lambda: 0)
    assert dispatcher.submitted == [0, 7]  # its backoff passed: it goes first
    _fail(sched, 7)  # a second failure waits twice as long
    clock.now += 1.9
    sched.top_up(dispatcher, loader, lambda: 0)
    assert dispatcher.submitted == [0, 7, 1]
    clock.now += 0.1
    sched.top_up(dispatcher, loader, lambda: 0)
    assert dispatcher.submitted == [0, 7, 1, 7]
    assert counters.failed_groups == 2
    assert counters.retried_groups == 2 and counters.retry_backoff_s == 3.0


@pytest.mark.parametrize("sync", [True, False])
def test_in_sync_mode_a_retry_keeps_its_place_in_the_batch(sync: bool) -> None:
    """sync mode: two of a step's four groups fail (their server died); no new group goes
    out while they wait for their backoff, so the step trains exactly its four groups on
    its weights. Other modes send new groups meanwhile (kept for a later batch)."""
    clock, counters = Clock(), RunCounters()
    sched, loader = _scheduler(clock, counters), Loader(10)
    sched.target, sched.hold_for_retries = 4, sync
    dispatcher: Any = Dispatcher()
    sched.top_up(dispatcher, loader, lambda: 0)
    assert dispatcher.submitted == [0, 1, 2, 3]
    _fail(sched, 2)
    _fail(sched, 3)
    sched.top_up(dispatcher, loader, lambda: 2)  # groups 0 and 1 are in the pool
    assert dispatcher.submitted == ([0, 1, 2, 3] if sync else [0, 1, 2, 3, 4, 5])
    clock.now += 1.0
    sched.top_up(dispatcher, loader, lambda: 2)
    assert dispatcher.submitted[-2:] == [2, 3]
    assert len(dispatcher.submitted) == (6 if sync else 8)


def test_a_group_out_of_tries_is_not_queued_again(caplog: pytest.LogCaptureFixture) -> None:
    clock, counters = Clock(), RunCounters()
    sched = _scheduler(clock, counters)
    for _ in range(4):
        _fail(sched, 5)
    assert counters.retried_groups == 3 and counters.failed_groups == 4
    assert "group 5 failed 4 times (rollout_worker.task_retries=3)" in caplog.text
