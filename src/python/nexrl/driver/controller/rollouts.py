"""``RolloutService``: the step's generate-and-score stage, as the controller runs it.

It owns what keeps rollouts going: the ``RolloutScheduler`` (which groups go out,
retries, skips, which come back to be trained), the ``ClusterWatch`` (inference
health, lost and silent workers), the ``HarvestRecorder`` (finished rollouts into
the run's counts) and dynamic sampling's ``FilterCount``. ``service`` is one turn of
that work; the controller calls it whenever it waits (for a batch, for the trainer,
for validation). ``next_batch`` tops up and waits until the pool hands out whole
groups, exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nexrl.driver.controller.counters import RunCounters
from nexrl.driver.controller.errors import ControllerError
from nexrl.driver.controller.harvest import HarvestRecorder
from nexrl.driver.controller.report import waiting_line
from nexrl.driver.controller.sampling import FilterCount
from nexrl.driver.controller.scheduler import RolloutScheduler
from nexrl.driver.controller.watch import ClusterWatch, scheduler_gone

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig
    from nexrl.driver.controller.components import Components

__all__ = ["RolloutService", "Waiting"]

logger = logging.getLogger("nexrl.driver.controller.loop")  # the controller's lines: one name


@dataclass(frozen=True)
class Waiting:
    """Where the run is while it waits for a batch: the step done, the policy version
    rollouts run on, the step this command started at, whether a stop was asked for,
    and the stop line when the Dask scheduler is gone."""

    step: int
    version: int
    first_step: int
    stopped: Callable[[], bool]
    lost: Callable[[], str]


class RolloutService:
    """Rollouts kept going while the controller waits (module doc)."""

    def __init__(self, spec: RecipeConfig, counters: RunCounters) -> None:
        self.spec = spec
        rw, rm = spec.rollout_worker, spec.runtime_monitor
        self.scheduler = RolloutScheduler(
            counters,
            task_retries=rw.task_retries,
            max_in_flight=rw.max_groups_in_flight,
            retry_backoff_s=rw.retry_backoff_s,
            retry_backoff_max_s=rw.retry_backoff_max_s,
        )
        self.watch = ClusterWatch(counters, rm.health_check_interval_s)
        self.harvest = HarvestRecorder(self.scheduler, counters, self.watch, rm.max_task_failures)
        # dynamic sampling's filtered groups, counted from the first batch (start())
        self.filtered = FilterCount(spec.algorithm.max_extra_sampling_rounds)
        self.target = 1  # groups running or in the pool to aim for (set by attach())

    def attach(self, parts: Components) -> None:
        """Watch the run's cluster; aim for the batches the sync mode keeps in flight."""
        local = self.spec.cluster.type == "local"
        self.watch.subscribe(parts, self.spec.runtime_monitor.worker_silent_s, local)
        self.target = parts.groups_per_batch * parts.sync_policy.batches_dispatched
        self.scheduler.target = self.target
        self.scheduler.hold_for_retries = parts.sync_policy.retries_hold_their_place

    def service(
        self,
        parts: Components,
        step: int,
        lost: Callable[[], str],
        *,
        dispatch: bool,
        training: bool = False,
    ) -> None:
        """Harvest finished rollouts, count failures, watch inference, top up: no more
        groups than the steps left need (``training``: the next step's batch is training
        now), so the last step is not followed by rollouts nobody trains. ``lost``: the
        stop line when the scheduler is gone."""
        if scheduler_gone(parts.cluster):
            raise ControllerError(lost())
        # a stopped trainer worker also holds rollout tasks (a service: nothing to check)
        parts.trainer.check_heartbeats(f"worker (step {step + 1})")
        self.watch.drop_silent_workers(parts)  # a stopped rollout worker's tasks move on
        self.harvest.record(parts.dispatcher.harvest(), parts)
        self.watch.health_check(parts)
        if dispatch:
            left = self.spec.trainer.total_train_steps - step - int(training)
            self.scheduler.target = min(self.target, max(0, left) * parts.groups_per_batch)
            self.scheduler.top_up(parts.dispatcher, parts.loader, parts.pending_groups)

    def next_batch(self, parts: Components, at: Waiting) -> tuple[Any, Any, int, Any] | None:
        """``(batch, trained, filtered, rows)``: the pool's next batch, the columns trained
        (first copies, in (group, run) order: commit order depends on timing, this
        order makes a seeded run repeatable), the groups dynamic sampling filtered
        while it waited, and where the trained trajectories are in the pool
        (``PoolRows``: what the trainer ranks read). None when the data is exhausted or
        a stop was asked for."""
        while True:
            batch = self._wait_for_batch(parts, at)
            if batch is None:
                return None
            self.scheduler.counters.delivered(len(batch))
            keep = self.scheduler.first_copy_index(batch)
            if len(keep):
                break  # (a batch holding only second copies is skipped whole)
        filtered = self.filtered.take(parts.pool)
        cols = batch.columns
        keep = keep[np.lexsort((cols.run_id[keep], cols.group_id[keep]))]
        return batch, cols.take(keep), filtered, batch.rows.take(keep)

    def _wait_for_batch(self, parts: Components, at: Waiting) -> Any:
        started = said = time.monotonic()
        notice_s = self.spec.runtime_monitor.wait_notice_s
        while not at.stopped():
            self.service(parts, at.step, at.lost, dispatch=True)
            if time.monotonic() - said >= notice_s:
                said = time.monotonic()
                self._say_waiting(parts, at.step, said - started)
            quiet = self.scheduler.idle(parts.dispatcher)
            batch = parts.pool.get_batch(
                current_version=at.version,
                loaded_batch_finished=quiet,
                min_trajectories=self.filtered.short_batch_floor(parts),
            )
            if batch is not None:
                return batch
            self.filtered.check_not_all_filtered(parts, at.step, at.first_step)
            if quiet and self.scheduler.loader_done:
                logger.info("data exhausted (data.total_epochs) and the pool has no full batch")
                return None
            parts.dispatcher.wait_any(0.2)
        return None

    def _say_waiting(self, parts: Components, step: int, waited: float) -> None:
        """One line for a step whose batch is long in coming (``report.waiting_line``)."""
        parts.progress.write(
            waiting_line(
                step + 1,
                waited,
                parts,
                self.spec.trajectory_pool.batch_size,
                self.filtered.since_mark(parts.pool),
                self.spec.runtime_monitor.task_timeout_s,
            )
        )
