"""What finished rollouts bring back: training groups to the scheduler, validation
results collected, failures counted against ``runtime_monitor.max_task_failures``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nexrl.core.util.disk import says_no_space
from nexrl.driver.controller.driver_log import DETAILS_LOGGER
from nexrl.driver.controller.errors import ControllerError

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.counters import RunCounters
    from nexrl.driver.controller.dispatch import Harvest
    from nexrl.driver.controller.scheduler import RolloutScheduler
    from nexrl.driver.controller.watch import ClusterWatch

__all__ = ["HarvestRecorder"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name
SHOWN_ROWS = 3  # rows that could not be evaluated named on the terminal; the rest in the log


class HarvestRecorder:
    """Records each ``Harvest`` of the dispatcher; ``val_summaries`` and
    ``val_failed_prompts``: the validation results collected, and the prompts of its
    tasks that failed, since the last validation started."""

    def __init__(
        self,
        scheduler: RolloutScheduler,
        counters: RunCounters,
        watch: ClusterWatch,
        max_task_failures: int,
    ) -> None:
        self.scheduler = scheduler
        self.counters = counters
        self.watch = watch
        self.limit = max_task_failures
        self.val_summaries: list[Any] = []  # validation results being collected
        self.val_failed_prompts = 0  # prompts of validation tasks that failed (likewise)
        self._replaced_server_failures = 0  # failed groups sent to a server replaced since
        self.not_evaluated: set[int] = set()  # data rows named as not evaluable (indices)
        self.evaluated = False  # a training group had a sample the evaluator scored

    def not_evaluable(self, g: Any, summary: Any, parts: Components) -> None:
        """A training group whose every sample had an evaluator error: its data row could
        not be evaluated at all (its samples score 0 and teach nothing). One ERROR line
        per row, naming its file and line (on the terminal for the first ``SHOWN_ROWS``,
        then one line saying the rest are in logs/driver.log: an evaluator that fails on
        every row is not a line per row); counted in ``rows_not_evaluated``. While no
        sample of any row has been scored, the line says so: the evaluator, not the
        data, is then the first suspect."""
        n = len(summary.rewards)
        if n and summary.evaluator_errors < n:
            self.evaluated = True
        if not n or summary.evaluator_errors < n:
            return
        index = int(g.items[0]["index"])
        if index in self.not_evaluated:
            return
        self.not_evaluated.add(index)
        self.counters.row_not_evaluated()
        shown = len(self.not_evaluated) <= SHOWN_ROWS
        if len(self.not_evaluated) == SHOWN_ROWS + 1:
            logger.error(
                "more data rows could not be evaluated: each is named in logs/driver.log, "
                "and the summary counts them"
            )
        (logger if shown else logging.getLogger(DETAILS_LOGGER)).error(
            "data row %s could not be evaluated: the evaluator failed on all %d samples "
            "(%s); they score 0%s (details: logs/dask-worker-*.log)",
            parts.loader.source(index),
            n,
            summary.first_error or "unknown error",
            "" if self.evaluated else ", as on every row so far: look at the evaluator first",
        )

    def record(self, h: Harvest, parts: Components) -> None:
        self.counters.backed_up(h.backed_up)
        if any(
            g.tag == "train" and s.evaluator_errors < len(s.rewards) for g, s in h.done
        ):  # a row of this harvest was scored: the others' lines need not blame the evaluator
            self.evaluated = True
        for g, summary in h.done:
            if g.tag == "train":
                self.scheduler.record_done(summary)
                self.not_evaluable(g, summary, parts)
            else:
                self.val_summaries.append(summary)
        limit = self.limit
        if any(f.component == "rollout" for _, f in h.failed) and parts.supervisor.exited():
            # every rollout sent to a dead server fails: start another now, not at the
            # next health check (runtime_monitor.health_check_interval_s)
            parts.supervisor.check()
            self.watch.follow_inference_restarts(parts)
        current = tuple(parts.dispatcher.spec.base_urls)
        for g, failure in h.failed:
            if says_no_space(failure.error):  # a pool chunk could not be written
                raise ControllerError(f"rollout: {failure.describe()}")
            self.scheduler.record_failure(g, failure)
            if g.tag != "train":  # a validation task holds many prompts
                self.val_failed_prompts += len(g.items)
            if (
                failure.component == "rollout"
                and g.task is not None
                and g.task.base_urls != current
                and parts.supervisor.restarts <= max(3, limit)
            ):
                # sent to a server that died and was replaced since: rolled out again,
                # counted in inference/restarts, not against max_task_failures (up to
                # max(3, max_task_failures) restarts: a server that a request kills again
                # and again must still stop the run)
                self._replaced_server_failures += 1
            failed = self.counters.failed_groups - self._replaced_server_failures
            if failed > limit:
                raise ControllerError(
                    f"{int(failed)} rollout groups failed (limit "
                    f"runtime_monitor.max_task_failures={limit}); last: {failure.describe()}"
                )
