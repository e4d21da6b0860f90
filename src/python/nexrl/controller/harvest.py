"""What finished rollouts bring back: training groups to the scheduler, validation
results collected, failures counted against ``runtime_monitor.max_task_failures``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexrl.controller.errors import ControllerError
from nexrl.util.disk import says_no_space

if TYPE_CHECKING:
    from nexrl.controller.components import Components
    from nexrl.controller.dispatch import Harvest
    from nexrl.controller.scheduler import RolloutScheduler
    from nexrl.controller.watch import ClusterWatch

__all__ = ["HarvestRecorder"]


class HarvestRecorder:
    """Records each ``Harvest`` of the dispatcher; ``val_summaries``: the validation
    results collected since the last validation started."""

    def __init__(
        self,
        scheduler: RolloutScheduler,
        counters: dict[str, float],
        watch: ClusterWatch,
        max_task_failures: int,
    ) -> None:
        self.scheduler = scheduler
        self.counters = counters
        self.watch = watch
        self.limit = max_task_failures
        self.val_summaries: list[Any] = []  # validation results being collected
        self._replaced_server_failures = 0  # failed groups sent to a server replaced since

    def record(self, h: Harvest, parts: Components) -> None:
        for g, summary in h.done:
            if g.tag == "train":
                self.scheduler.record_done(summary)
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
            failed = self.counters["failed_groups"] - self._replaced_server_failures
            if failed > limit:
                raise ControllerError(
                    f"{int(failed)} rollout groups failed (limit "
                    f"runtime_monitor.max_task_failures={limit}); last: {failure.describe()}"
                )
