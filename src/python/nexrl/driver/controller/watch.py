"""Watching the cluster while the run goes on: Dask workers lost or silent (dropped:
``silent_workers``), the Dask scheduler gone, the inference server restarted
(rollouts then go to the new one)."""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Any

from nexrl.driver.controller.silent_workers import SilentWorkers

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.counters import RunCounters

__all__ = ["ClusterWatch", "scheduler_gone"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name


def scheduler_gone(cluster: Any) -> bool:
    """Whether the Dask scheduler is gone. The client notices a lost connection at once
    and tries to reconnect for its timeout (60 s for ``cluster.type=address``), then
    closes; the scheduler counts as gone as soon as the client is not connected and
    nothing answers at the scheduler's address, or once the client gave up: every wait
    on the cluster is bounded by that."""
    status = str(getattr(cluster.client, "status", "running"))
    if status == "running":
        return False
    return status in ("closing", "closed", "failed") or bool(cluster.scheduler_lost())


class ClusterWatch:
    """Counts workers lost and inference restarts into ``counters`` and notes when
    ``cluster.json`` is out of date (``changed``: a worker joined or left, the server
    restarted)."""

    def __init__(self, counters: RunCounters, health_check_interval_s: float) -> None:
        self.counters = counters
        self.interval_s = health_check_interval_s
        self.changed = False
        self._lost_workers: collections.deque[tuple[str, int]] = collections.deque()
        self._last_health = 0.0
        self._seen_restarts = 0  # the inference supervisor's restarts counted so far
        self.silent: SilentWorkers | None = None  # made once the run is built (subscribe)

    def subscribe(self, parts: Components, worker_silent_s: float, local: bool) -> None:
        """Hear of every Dask worker the scheduler removes (its ``remove-worker`` events,
        pushed to the client: no polling). A worker killed, out of memory or whose job
        ended is ``expected: False``; one closed on purpose is not counted. Watch the
        heartbeats of the workers that are not trainer ranks' (``worker_silent_s``;
        ``local``: a local cluster, whose silent workers are also killed)."""
        cluster = parts.cluster

        def trainer_workers() -> set[str]:
            beats = parts.trainer.heartbeats
            return set(beats.addrs) if beats is not None else set()

        self.silent = SilentWorkers(
            cluster.client,
            worker_silent_s,
            trainer_workers,
            kill_local=local,
        )

        def on_event(event: Any) -> None:  # on the client's event loop thread
            _, msg = event
            action = msg.get("action") if isinstance(msg, dict) else None
            if action in ("add-worker", "remove-worker"):
                self.changed = True  # cluster.json is rewritten at the next check
            lost = action == "remove-worker"
            if lost and not msg.get("expected"):
                self._lost_workers.append(
                    (str(msg.get("worker")), len(msg.get("processing-tasks") or ()))
                )

        try:
            cluster.client.subscribe_topic("all", on_event)
        except Exception as exc:  # a client that cannot subscribe: no count, no stop
            logger.debug("worker events: %s", exc)

    def health_check(self, parts: Components) -> None:
        """Every ``runtime_monitor.health_check_interval_s``: check the inference server
        (restarting a dead one), count lost workers, rewrite ``cluster.json`` if needed."""
        now = time.monotonic()
        if now - self._last_health >= self.interval_s:
            self._last_health = now
            parts.supervisor.check()
            self.follow_inference_restarts(parts)
            self.count_lost_workers()
            if self.changed:
                self.changed = False
                parts.record_cluster()

    def drop_silent_workers(self, parts: Components) -> None:
        """Drop the workers silent for ``runtime_monitor.worker_silent_s`` (one warning
        each, counted in ``cluster/workers_lost``); ``NoWorkerLeft`` once none that can
        run rollouts is left."""
        if self.silent is None:
            return
        for line in self.silent.check():
            self.counters.worker_lost()
            self.changed = True
            parts.progress.warn(line)
        self.silent.none_left(parts.dispatcher.resources)

    def count_lost_workers(self) -> None:
        """Count the workers lost since the last check: Dask reruns their tasks
        elsewhere; ``cluster/workers_lost`` says how often that happened (a worker its
        nanny restarts comes back under a new address)."""
        while self._lost_workers:
            worker, tasks = self._lost_workers.popleft()
            self.counters.worker_lost()
            logger.warning(
                "Dask worker %s was lost with %d tasks running (%d workers lost so far); its "
                "tasks run again elsewhere",
                worker,
                tasks,
                self.counters.workers_lost,
            )

    def follow_inference_restarts(self, parts: Components) -> None:
        """Count the supervisor's restarts and send rollouts to the new server."""
        new = parts.supervisor.restarts - self._seen_restarts
        if new > 0:
            self._seen_restarts = parts.supervisor.restarts
            self.counters.inference_restarted(new)
            self.changed = True  # the server's new pid (and job) in cluster.json
            parts.dispatcher.spec = parts.dispatcher.spec.with_base_urls(parts.supervisor.base_urls)
