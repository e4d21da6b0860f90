"""Rollout workers that stop answering: found by their heartbeats, dropped, replaced.

A Dask worker heartbeats to the scheduler every 0.5-5 s from its event loop, also
while a task runs. One that has sent none for ``runtime_monitor.worker_silent_s`` is
stopped (``SIGSTOP``, a debugger), swapped out or wedged. Dask alone waits: its
``worker-ttl`` (5 minutes) asks the worker's nanny to restart it, and that restart
waits on the stopped process (a run once waited out a 420 s stop). So the driver
asks the scheduler to drop the worker (``Scheduler.remove_worker``): its tasks go
back to the scheduler and run on the other workers at once; if it wakes, the
scheduler no longer knows it and it closes itself, and a group it commits meanwhile
is a second copy, which the pool delivers once. On a local cluster the process is
killed, and its nanny starts a fresh worker in its place.

Off a local cluster nothing replaces a dropped worker: once no worker that can take
rollouts (one offering the rollout tasks' resources) has been there for another
``worker_silent_s`` after a drop, ``none_left`` gives the line that stops the run
(resumable) instead of waiting for tasks nothing can run.

Trainer ranks' workers are left to the trainer's own heartbeats
(``runtime_monitor.trainer_silent_s``: the run stops, resumable). Silence is measured
on this process's clock between probes of the scheduler's ``last_seen``, as for the
trainer (``nexrl.trainer.heartbeats``).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from nexrl.core.util.dask_workers import SilenceClock, offers, workers_of
from nexrl.driver.controller.errors import ControllerError

__all__ = ["NoWorkerLeft", "SilentWorkers", "drop_worker"]

logger = logging.getLogger("nexrl.driver.controller.loop")  # the controller's lines


class NoWorkerLeft(ControllerError):
    """Every worker that could run rollouts was dropped as silent and none came back."""


async def drop_worker(dask_scheduler: Any, address: str) -> tuple[int, int | None]:
    """On the scheduler: remove the worker at ``address`` (its tasks are rescheduled);
    ``(tasks it was running, its pid)``, ``(-1, None)`` when it is already gone."""
    ws = dask_scheduler.workers.get(address)
    if ws is None:
        return -1, None
    running, pid = len(ws.processing), ws.pid
    await dask_scheduler.remove_worker(
        address, stimulus_id=f"nexrl-silent-{time.time()}", expected=True, close=True
    )
    return running, pid


class SilentWorkers:
    """Probe the scheduler at most every ``every_s``; drop each worker (not in
    ``exclude()``) silent for ``silent_s``; ``kill_local``: also SIGKILL its process
    (a local cluster: same machine, a nanny restarts it). 0 ``silent_s`` = off."""

    def __init__(
        self,
        client: Any,
        silent_s: float,
        exclude: Callable[[], set[str]] = set,
        *,
        kill_local: bool = False,
        every_s: float = 1.0,
    ) -> None:
        self.client, self.silent_s, self.every_s = client, silent_s, every_s
        self.exclude, self.kill_local = exclude, kill_local
        self._clock = SilenceClock()
        self._next = 0.0
        self._none_since: float | None = None  # when no rollout-capable worker was seen
        self._next_none = 0.0
        self.dropped: list[str] = []  # addresses dropped, in order

    def check(self) -> list[str]:
        """Drop the workers silent for ``silent_s``; one line each (returned)."""
        now = time.monotonic()
        if not self.silent_s or now < self._next:
            return []
        self._next = now + self.every_s
        try:
            workers = workers_of(self.client)
        except Exception:  # a scheduler that does not answer: the controller's watch
            return []
        skip = self.exclude()
        lines = []
        for addr, quiet in self._clock.observe(workers, now).items():
            if addr in skip or quiet < self.silent_s:
                continue
            line = self._drop(addr, workers[addr], quiet)
            if line:
                lines.append(line)
        return lines

    def _drop(self, addr: str, info: dict[str, Any], quiet: float) -> str | None:
        try:
            running, pid = self.client.run_on_scheduler(drop_worker, address=addr)
        except Exception as exc:
            logger.warning("could not drop the silent Dask worker %s: %s", addr, exc)
            return None
        self._clock.forget(addr)
        if running < 0:
            return None  # it left meanwhile: the cluster watch counts it
        self.dropped.append(addr)
        host = info.get("host")
        then = "it closes itself if it wakes"
        if self.kill_local and isinstance(pid, int):
            try:
                os.kill(pid, signal.SIGKILL)
                then = "killed; its nanny starts a fresh worker"
            except OSError as exc:
                then = f"could not be killed ({exc.strerror}); it closes itself if it wakes"
        return (
            f"Dask worker {addr} (pid {pid} on {host}) sent no heartbeat for {quiet:.0f}s "
            f"(stopped, swapped out or wedged): dropped, its {running} running tasks go to "
            f"the other workers; {then} (runtime_monitor.worker_silent_s={self.silent_s:g})"
        )

    def none_left(self, resources: Mapping[str, float] | None) -> None:
        """After a drop: raise ``NoWorkerLeft`` once no worker offering ``resources`` (any
        worker when None) that is not silent has been there for ``silent_s`` (time for
        a replacement to join)."""
        now = time.monotonic()
        if not self.dropped or not self.silent_s or now < self._next_none:
            return
        self._next_none = now + self.every_s
        try:
            workers = workers_of(self.client)
        except Exception:  # a scheduler that does not answer: the controller's watch
            return
        quiet = self._clock.observe(workers, now)

        def can_run(addr: str, info: dict[str, Any]) -> bool:
            fits = offers(info.get("resources"), resources)
            return fits and quiet.get(addr, 0.0) < self.silent_s

        if any(can_run(a, i) for a, i in workers.items()):
            self._none_since = None
            return
        if self._none_since is None:
            self._none_since = now
        if now - self._none_since < self.silent_s:
            return
        need = ", ".join(f"{k}={v:g}" for k, v in (resources or {}).items()) or "any"
        raise NoWorkerLeft(
            f"no Dask worker is left to run rollouts (resources {need}): "
            f"{len(self.dropped)} dropped as silent ({', '.join(self.dropped)}) and none "
            f"joined for {self.silent_s:g}s (runtime_monitor.worker_silent_s); start "
            "workers again (or check why they stopped answering)"
        )
