"""``RolloutDispatcher``: prompt groups become rollout + evaluator futures on Dask.

One group = two futures, named so the dashboard shows what they are
(``rollout-g<group_id>-<tag>…`` then ``evaluate-g<group_id>-<tag>…``). Dask
retries them when they raise (``task_retries``) and reschedules them when their
worker dies; rollout futures ask for ``CPU`` resource units so a cluster never
runs more of them than it has room for.

The dispatcher never blocks for long: ``wait_any`` waits at most its timeout,
``harvest`` collects what has finished, and a group running past
``task_timeout_s`` is cancelled and reported as a failure naming the component
(rollout or evaluator) that hung.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from nexrl.rollout_worker.tasks import GroupSummary, RolloutSpec, evaluate_task, rollout_task

__all__ = ["InFlight", "RolloutDispatcher", "TaskFailure"]

logger = logging.getLogger(__name__)


@dataclass
class InFlight:
    """A group whose futures are running."""

    items: list[dict[str, Any]]
    rollout: Any
    evaluate: Any
    submitted: float
    tag: str

    @property
    def group_id(self) -> int:
        return int(self.items[0]["group_id"])


@dataclass(frozen=True)
class TaskFailure:
    """A group that failed for good (after Dask's retries)."""

    component: str  # "rollout" or "evaluator"
    key: str
    group_id: int
    tag: str
    error: str

    def describe(self) -> str:
        return f"{self.component} future {self.key} (group {self.group_id}): {self.error}"


@dataclass
class Harvest:
    """Groups that finished since the last ``harvest``."""

    done: list[tuple[InFlight, GroupSummary]] = field(default_factory=list)
    failed: list[tuple[InFlight, TaskFailure]] = field(default_factory=list)


class RolloutDispatcher:
    """Submits groups and tracks their futures (see the module doc)."""

    def __init__(
        self,
        client: Any,
        spec: RolloutSpec,
        *,
        task_retries: int = 2,
        rollout_cpus: int = 1,
        task_timeout_s: float = 600.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.client = client
        self.spec = spec
        self.task_retries = task_retries
        self.resources = {"CPU": rollout_cpus} if rollout_cpus else None
        self.task_timeout_s = task_timeout_s
        self._clock = clock
        self._running: list[InFlight] = []

    # -- submitting -------------------------------------------------------------
    def submit(
        self,
        items: list[dict[str, Any]],
        *,
        commit: bool = True,
        spec: RolloutSpec | None = None,
        tag: str = "train",
    ) -> InFlight:
        """Start the rollout and evaluator futures of one group (``items`` share a group_id)."""
        spec = spec or self.spec
        gid = int(items[0]["group_id"])
        suffix = f"g{gid}-{tag}-{uuid.uuid4().hex[:8]}"
        rollout = self.client.submit(
            rollout_task,
            spec,
            items,
            key=f"rollout-{suffix}",
            retries=self.task_retries,
            resources=self.resources,
            pure=False,
        )
        evaluate = self.client.submit(
            evaluate_task,
            spec,
            rollout,
            commit,
            key=f"evaluate-{suffix}",
            retries=self.task_retries,
            resources=self.resources,  # on rollout workers, never a trainer's (Slurm)
            pure=False,
        )
        group = InFlight(items, rollout, evaluate, self._clock(), tag)
        self._running.append(group)
        return group

    # -- watching ---------------------------------------------------------------
    def running(self, tag: str | None = None) -> list[InFlight]:
        return [g for g in self._running if tag is None or g.tag == tag]

    def running_trajectories(self, tag: str | None = None) -> int:
        return sum(len(g.items) for g in self.running(tag))

    def wait_any(self, timeout_s: float) -> None:
        """Block until some running group finishes, or ``timeout_s`` passes."""
        if not self._running:
            time.sleep(timeout_s)
            return
        from distributed import wait

        with contextlib.suppress(TimeoutError):
            wait(
                [g.evaluate for g in self._running],
                timeout=timeout_s,
                return_when="FIRST_COMPLETED",
            )

    def harvest(self) -> Harvest:
        """Collect finished, failed and timed-out groups (never blocks)."""
        out = Harvest()
        now = self._clock()
        still: list[InFlight] = []
        for g in self._running:
            status = g.evaluate.status
            if status == "finished":
                try:
                    out.done.append((g, g.evaluate.result(timeout=30)))
                except Exception as exc:  # lost between status and result: a failure
                    out.failed.append((g, self._failure(g, exc)))
            elif status in ("error", "cancelled"):
                out.failed.append((g, self._failure(g, None)))
            elif now - g.submitted > self.task_timeout_s:
                component = "rollout" if g.rollout.status != "finished" else "evaluator"
                key = g.rollout.key if component == "rollout" else g.evaluate.key
                self.client.cancel([g.rollout, g.evaluate])
                failure = TaskFailure(
                    component,
                    str(key),
                    g.group_id,
                    g.tag,
                    f"still running after runtime_monitor.task_timeout_s={self.task_timeout_s:g}s; "
                    "cancelled (a hung inference service or evaluator?)",
                )
                out.failed.append((g, failure))
            else:
                still.append(g)
        self._running = still
        for _, f in out.failed:
            logger.warning("%s", f.describe())
        return out

    def _failure(self, g: InFlight, exc: BaseException | None) -> TaskFailure:
        for component, fut in (("rollout", g.rollout), ("evaluator", g.evaluate)):
            if fut.status in ("error", "cancelled"):
                err = exc or _exception(fut)
                return TaskFailure(component, str(fut.key), g.group_id, g.tag, _describe(err))
        return TaskFailure(
            "evaluator", str(g.evaluate.key), g.group_id, g.tag, _describe(exc or "lost")
        )

    # -- stopping ---------------------------------------------------------------
    def drain(self, timeout_s: float) -> Harvest:
        """Wait (bounded) until nothing is running; what finished, failed or timed out."""
        total = Harvest()
        deadline = self._clock() + timeout_s
        while self._running:
            self.wait_any(min(1.0, max(0.01, deadline - self._clock())))
            h = self.harvest()
            total.done += h.done
            total.failed += h.failed
            if self._running and self._clock() >= deadline:
                for g in self._running:
                    self.client.cancel([g.rollout, g.evaluate])
                    total.failed.append(
                        (
                            g,
                            TaskFailure(
                                "rollout", str(g.rollout.key), g.group_id, g.tag, "drain timeout"
                            ),
                        )
                    )
                self._running = []
        return total

    def cancel_all(self) -> list[InFlight]:
        """Cancel every running group; returns them (their items were not rolled out)."""
        groups, self._running = self._running, []
        futures = [f for g in groups for f in (g.rollout, g.evaluate)]
        if futures:
            try:
                self.client.cancel(futures)
            except Exception as exc:  # the cluster may already be gone
                logger.debug("cancel: %s", exc)
        return groups


def _exception(fut: Any) -> Any:
    try:
        return fut.exception(timeout=10)
    except Exception as exc:
        return exc


def _describe(err: Any) -> str:
    if isinstance(err, BaseException):
        return f"{type(err).__name__}: {err}"
    return str(err)
