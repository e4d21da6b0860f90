"""``RolloutScheduler``: which prompt groups go out next, and which come back to be trained.

The controller's loop asks it two things, it keeps the bookkeeping behind them:

* **top-up** (``top_up``): dispatch groups until ``target`` groups are running or
  waiting in the pool, with at most ``max_in_flight`` running. Failed groups go
  first (**retry**: a training group that failed for good is rolled out again up
  to ``task_retries`` times, counted per group id), then new groups from the data
  loader. A group already committed to the pool (**skip**: a resumed run finished
  it after its checkpoint) is never dispatched again.
* **backoff**: a failed group is not rolled out again at once but after
  ``retry_backoff_s`` seconds, doubled for each further failure of the same group
  and capped at ``retry_backoff_max_s`` (1 s, 2 s, 4 s, ... by default): a cluster
  losing workers one after another, or an inference service restarting, is not
  hammered with the same groups. New groups are dispatched meanwhile, except in
  ``sync`` mode (``hold_for_retries``): there a group waiting for its retry keeps its
  place in ``target``, so the step's batch is the groups that went out for it, all on
  the step's weights (a new group sent meanwhile would be left over in the pool and
  trained a step later, on older weights). Each delay is
  logged (a warning naming the group, the attempt and the delay) and counted
  (``retried_groups``, ``retry_backoff_s``: the delays' sum).
* **dedup** (``first_copies``): Dask runs a future at least once, so a group can
  be committed twice; each group is trained from the first commit seen
  (``trained``: a ``TrainedGroups`` record, bounded in memory) and later copies are
  dropped and counted.

What it holds goes into each checkpoint through ``ControllerState`` (``pending``:
the running groups plus the retry queue, ``trained``, ``counters``) and comes back
with ``restore``. ``counters`` is the controller's ``RunCounters`` (shared, not copied).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nexrl.driver.controller.dispatch import InFlight, RolloutDispatcher, TaskFailure
from nexrl.driver.controller.trained import TrainedGroups

if TYPE_CHECKING:
    from nexrl.driver.controller.counters import RunCounters

__all__ = ["RolloutScheduler"]

logger = logging.getLogger(__name__)

Group = list[dict[str, Any]]  # the items of one prompt group (they share a group_id)


class RolloutScheduler:
    """Retry, top-up, attempt counting, skip set and dedup (see the module doc)."""

    def __init__(
        self,
        counters: RunCounters,
        *,
        task_retries: int,
        max_in_flight: int,
        target: int = 1,
        retry_backoff_s: float = 1.0,
        retry_backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counters = counters
        self.task_retries = task_retries
        self.retry_backoff_s = retry_backoff_s
        self.retry_backoff_max_s = retry_backoff_max_s
        self._clock = clock
        self.not_before: dict[int, float] = {}  # group id -> when its retry may go out
        self.max_in_flight = max_in_flight
        self.target = target  # groups running or waiting in the pool to aim for
        self.hold_for_retries = False  # sync mode: queued retries count toward target
        self.retry: list[Group] = []  # failed groups to roll out again
        self.attempts: dict[int, int] = {}  # group id -> failed attempts
        self.skip: set[int] = set()  # group ids already in the pool: never dispatched
        self.trained = TrainedGroups()  # which groups were trained, from which commit
        self.loader_done = False  # the data loader has no more groups
        self.last_failure: TaskFailure | None = None

    # -- resume -----------------------------------------------------------------
    def restore(
        self,
        pending: list[Group],
        trained: dict[Any, str],
        skip: set[int],
        trained_ranges: list[list[int]] | None = None,
    ) -> None:
        """State of a checkpoint: ``pending`` is rolled out again (except ``skip``);
        ``trained`` and ``trained_ranges``: its ``TrainedGroups.state()``."""
        self.skip = set(skip)
        # A group in flight at the checkpoint that reached the pool anyway is not queued:
        # left in ``retry``, it kept ``idle`` False for good while ``top_up`` (the pool
        # full enough) never came to drop it, and a 'loaded_batch_finished' pool, which
        # waits for ``idle``, never handed out a batch again.
        self.retry = [g for g in pending if int(g[0]["group_id"]) not in self.skip]
        self.trained = TrainedGroups.restored(trained, trained_ranges or ())

    def pending(self, dispatcher: RolloutDispatcher) -> list[Group]:
        """Groups handed out and not in the pool yet: what a checkpoint re-dispatches."""
        return [g.items for g in dispatcher.running("train")] + list(self.retry)

    # -- results ----------------------------------------------------------------
    def record_done(self, summary: Any) -> None:
        self.counters.group_done(summary.evaluator_errors)

    def record_failure(self, group: InFlight, failure: TaskFailure) -> None:
        """Count a failed group; a training group is queued again while it has tries left."""
        self.counters.group_failed()
        self.last_failure = failure
        if group.tag == "train":
            tries = self.attempts.get(group.group_id, 0) + 1
            self.attempts[group.group_id] = tries
            if tries <= self.task_retries:
                delay = self.backoff(tries)
                self.not_before[group.group_id] = self._clock() + delay
                self.retry.append(group.items)
                self.counters.group_retried(delay)
                logger.warning(
                    "group %d failed (attempt %d of %d); rolled out again in %.1fs (backoff: "
                    "rollout_worker.retry_backoff_s=%g doubled per failure, at most "
                    "retry_backoff_max_s=%g)",
                    group.group_id,
                    tries,
                    self.task_retries + 1,
                    delay,
                    self.retry_backoff_s,
                    self.retry_backoff_max_s,
                )
            else:
                logger.warning(
                    "group %d failed %d times (rollout_worker.task_retries=%d); it is not "
                    "rolled out again",
                    group.group_id,
                    tries,
                    self.task_retries,
                )

    def backoff(self, tries: int) -> float:
        """Seconds before the ``tries``-th failure of a group is rolled out again:
        ``retry_backoff_s * 2 ** (tries - 1)``, at most ``retry_backoff_max_s``."""
        if self.retry_backoff_s <= 0:
            return 0.0
        return float(min(self.retry_backoff_s * 2.0 ** (tries - 1), self.retry_backoff_max_s))

    def _next_retry(self) -> Group | None:
        """The first queued retry whose backoff has passed (None if none has)."""
        now = self._clock()
        for i, items in enumerate(self.retry):
            if self.not_before.get(int(items[0]["group_id"]), 0.0) <= now:
                return self.retry.pop(i)
        return None

    # -- dispatching ------------------------------------------------------------
    def idle(self, dispatcher: RolloutDispatcher) -> bool:
        """Nothing running and nothing waiting to be retried."""
        return not dispatcher.running("train") and not self.retry

    def top_up(
        self, dispatcher: RolloutDispatcher, loader: Any, pool_groups: Callable[[], int]
    ) -> None:
        """Dispatch groups until ``target`` are running or in the pool (``pool_groups()``:
        groups committed and not handed out yet), at most ``max_in_flight`` running."""
        running = len(dispatcher.running("train"))
        out: list[Group] = []
        # Retries first, whatever the pool holds: a failed group belongs to batches already
        # handed out, which cannot finish without it. (Held back while the pool looked
        # full, e.g. per-call trajectories that count a group twice, a retry never went
        # out, the scheduler was never idle, and a 'loaded_batch_finished' step waited for
        # good with nothing in flight.)
        while self.retry and running < self.max_in_flight:
            ready = self._next_retry()
            if ready is None:
                break  # the rest wait for their backoff
            if int(ready[0]["group_id"]) not in self.skip:
                out.append(ready)
                running += 1
        if running >= min(self.target, self.max_in_flight):
            if out:
                dispatcher.submit_groups(out)
            return  # nothing more to dispatch: skip reading the pool's stats
        outstanding = running + pool_groups() + (len(self.retry) if self.hold_for_retries else 0)
        while outstanding < self.target and running < self.max_in_flight:
            ready = self._next_retry() if self.retry else None
            if ready is not None:
                items = ready
            elif self.loader_done:
                break  # only retries waiting for their backoff
            else:
                groups = loader.next_batch(1)
                if not groups:
                    self.loader_done = True
                    break
                items = groups[0]
            if int(items[0]["group_id"]) in self.skip:
                continue  # already in the pool (resumed run): never rolled out twice
            out.append(items)
            outstanding += 1
            running += 1
        if out:
            dispatcher.submit_groups(out)  # in tasks of rollout_worker.groups_per_task

    # -- delivered batches ------------------------------------------------------
    def first_copy_index(self, batch: Any) -> np.ndarray:
        """Positions in the pool batch of its trajectories minus second copies of a group
        (a future that Dask ran twice committed its group twice): each group is trained
        from one commit."""
        keep = []
        groups = batch.columns.group_id
        for i, (group, (writer, commit, _)) in enumerate(zip(groups, batch.ids, strict=True)):
            origin = f"{writer}/{commit}"
            if self.trained.first(int(group), origin):
                keep.append(i)
        dropped = len(batch) - len(keep)
        if dropped:
            self.counters.duplicates_dropped(dropped)
            logger.warning("dropped %d trajectories of groups already trained", dropped)
        return np.asarray(keep, dtype=np.int64)

    def first_copies(self, batch: Any) -> list[Any]:
        """``first_copy_index`` as ``Trajectory`` objects."""
        return batch.columns.take(self.first_copy_index(batch)).to_trajectories()
