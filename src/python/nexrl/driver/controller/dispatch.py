"""``RolloutDispatcher``: prompt groups become rollout + evaluator futures on Dask.

Groups go out in tasks of ``groups_per_task`` groups (``rollout_worker.groups_per_task``;
validation prompts in tasks of their own), each task two futures, named so the
dashboard shows what they are (``rollout-g<first group>-<tag>…`` then
``evaluate-g<first group>-<tag>…``; ``-g3+7-`` is group 3 and the 7 after it in the
task). The rollout future runs its groups' model calls concurrently and tries a
failing group again ``task_retries`` times; the evaluator future scores them and
commits the scored groups in one pool commit. A group that failed comes back as
a ``TaskFailure`` naming the component (rollout or evaluator) while the task's
other groups are delivered. Dask retries a future that raised as a whole (a
failed commit) and reschedules it when its worker dies; rollout futures ask for
``CPU`` resource units so a cluster never runs more of them than it has room for.

The dispatcher never blocks for long: ``wait_any`` waits at most its timeout,
``harvest`` collects what has finished, and a task running past
``task_timeout_s`` is cancelled and each of its groups reported as a failure
naming the component (rollout or evaluator) that hung. A training task running far
past the others may get a second copy (``nexrl.driver.controller.stragglers``): the
first copy to finish is the task's result.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from nexrl.core.util.dask_workers import offers
from nexrl.driver.controller.failures import TaskFailure, warn_failures
from nexrl.driver.controller.stragglers import Stragglers
from nexrl.rollout.worker.tasks import (
    GroupError,
    GroupSummary,
    RolloutSpec,
    describe,
    evaluate_groups_task,
    rollout_groups_task,
)

__all__ = ["InFlight", "RolloutDispatcher", "Task", "TaskFailure"]

logger = logging.getLogger(__name__)


@dataclass
class InFlight:
    """A group whose task is running."""

    items: list[dict[str, Any]]
    tag: str
    task: Task | None = None

    @property
    def group_id(self) -> int:
        return int(self.items[0]["group_id"])


@dataclass
class Task:
    """The two futures of one task (a few groups): rollout, then evaluator."""

    groups: list[InFlight]
    rollout: Any
    evaluate: Any
    submitted: float
    tag: str
    base_urls: tuple[str, ...] = ()  # the inference servers its rollouts were sent to
    spec: RolloutSpec | None = None  # what it was submitted with (for a second copy)
    commit: bool = True
    backup: tuple[Any, Any] | None = None  # a second copy's (rollout, evaluate) futures
    backed_up: bool = False  # a second copy was started (once per task)

    def release(self) -> None:
        """Drop the futures once harvested: a group still points at its task (``InFlight.task``,
        for ``base_urls``), and a future held past its harvest keeps its result on a worker,
        which Dask recomputes when that worker dies (old work run again)."""
        self.rollout = self.evaluate = None
        self.backup = None


@dataclass
class Harvest:
    """Groups that finished since the last ``harvest``."""

    done: list[tuple[InFlight, GroupSummary]] = field(default_factory=list)
    failed: list[tuple[InFlight, TaskFailure]] = field(default_factory=list)
    backed_up: int = 0  # training tasks given a second copy (stragglers)


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
        groups_per_task: int = 1,
        stragglers: Stragglers | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.client = client
        self.spec = spec
        self.task_retries = task_retries
        self.resources = {"CPU": rollout_cpus} if rollout_cpus else None
        self.task_timeout_s = task_timeout_s
        self.groups_per_task = max(1, int(groups_per_task))
        self._clock = clock
        self._tasks: list[Task] = []
        self.stragglers = stragglers or Stragglers(0.0, 0.0)

    # -- submitting -------------------------------------------------------------
    def submit(
        self,
        items: list[dict[str, Any]],
        *,
        commit: bool = True,
        spec: RolloutSpec | None = None,
        tag: str = "train",
    ) -> InFlight:
        """Start a task of one group (``items`` share a group_id; validation passes
        prompts of several groups as one)."""
        return self._submit_tasks([[items]], commit, spec or self.spec, tag)[0]

    def submit_groups(
        self,
        groups: list[list[dict[str, Any]]],
        *,
        commit: bool = True,
        spec: RolloutSpec | None = None,
        tag: str = "train",
    ) -> list[InFlight]:
        """Start ``groups`` in tasks of ``groups_per_task`` groups."""
        n = self.groups_per_task
        chunks = [groups[k : k + n] for k in range(0, len(groups), n)]
        return self._submit_tasks(chunks, commit, spec or self.spec, tag)

    def _submit_tasks(
        self,
        chunks: list[list[list[dict[str, Any]]]],
        commit: bool,
        spec: RolloutSpec,
        tag: str,
    ) -> list[InFlight]:
        """One task per chunk of groups. The rollout futures go to the scheduler in one
        message and the evaluator futures in another (``client.map``): each message is
        one graph update for the scheduler, so the last task of a step starts about
        as soon as the first."""
        suffixes = [_suffix(groups, tag) for groups in chunks]
        rollouts, evaluates = self._map(chunks, commit, spec, suffixes)
        out: list[InFlight] = []
        now = self._clock()
        for groups, rollout, evaluate in zip(chunks, rollouts, evaluates, strict=True):
            members = [InFlight(items, tag) for items in groups]
            task = Task(members, rollout, evaluate, now, tag, tuple(spec.base_urls), spec, commit)
            for g in members:
                g.task = task
            self._tasks.append(task)
            out += members
        return out

    def _map(
        self,
        chunks: list[list[list[dict[str, Any]]]],
        commit: bool,
        spec: RolloutSpec,
        suffixes: list[str],
        workers: list[str] | None = None,
    ) -> tuple[list[Any], list[Any]]:
        """The rollout and the evaluator futures of one task per chunk (``workers``:
        only there)."""
        n = len(chunks)
        placed = {"workers": workers, "allow_other_workers": False} if workers else {}
        rollouts = self.client.map(
            rollout_groups_task,
            [spec] * n,
            chunks,
            [self.task_retries] * n,
            key=[f"rollout-{s}" for s in suffixes],
            retries=self.task_retries,
            resources=self.resources,
            pure=False,
            **placed,
        )
        evaluates = self.client.map(
            evaluate_groups_task,
            [spec] * n,
            rollouts,
            [commit] * n,
            key=[f"evaluate-{s}" for s in suffixes],
            retries=self.task_retries,
            resources=self.resources,  # on rollout workers, never a trainer's (Slurm)
            pure=False,
            **placed,
        )
        return rollouts, evaluates

    def _back_up(self, tasks: list[Task]) -> int:
        """Start a second copy of each of ``tasks`` on a worker other than the one running
        its rollout; the number started (none where no other worker can take it)."""
        started = 0
        for t in tasks:
            t.backed_up = True
            others = self._other_workers(str(t.rollout.key))
            if not others or t.spec is None:
                continue
            chunk = [[g.items for g in t.groups]]
            suffix = f"{_suffix(chunk[0], t.tag)}-backup"
            (rollout,), (evaluate,) = self._map(chunk, t.commit, t.spec, [suffix], others)
            t.backup = (rollout, evaluate)
            started += 1
            logger.info(
                "rollout task %s still running after %.0fs (runtime_monitor.straggler_factor"
                "): a second copy started (%s); the first to finish is taken",
                t.rollout.key,
                self._clock() - t.submitted,
                rollout.key,
            )
        return started

    def _other_workers(self, key: str) -> list[str]:
        """The workers that could run rollouts other than the one processing ``key``."""
        try:
            return list(self.client.run_on_scheduler(_other_workers, key=key, need=self.resources))
        except Exception as exc:  # a scheduler that does not answer: no second copy
            logger.debug("straggler placement: %s", exc)
            return []

    def _settle(self, t: Task) -> None:
        """With a second copy: keep the copy that finished first (or the one still
        running when the other failed) as the task's futures, cancel the other."""
        if t.backup is None:
            return
        b_rollout, b_evaluate = t.backup
        first, second = t.evaluate.status, b_evaluate.status
        failed = ("error", "cancelled")
        if first == "finished" or (first in failed and second in failed):
            self.client.cancel([b_rollout, b_evaluate])
        elif second == "finished" or first in failed:
            if first != "finished":
                self.client.cancel([t.rollout, t.evaluate])
            t.rollout, t.evaluate = b_rollout, b_evaluate
        else:
            return  # both still running
        t.backup = None

    # -- watching ---------------------------------------------------------------
    def running(self, tag: str | None = None) -> list[InFlight]:
        return [g for t in self._tasks if tag is None or t.tag == tag for g in t.groups]

    def running_trajectories(self, tag: str | None = None) -> int:
        return sum(len(g.items) for g in self.running(tag))

    def wait_any(self, timeout_s: float) -> None:
        """Block until some running task finishes, or ``timeout_s`` passes."""
        if not self._tasks:
            time.sleep(timeout_s)
            return
        from distributed import wait

        with contextlib.suppress(TimeoutError):
            wait(
                [f for t in self._tasks for f in (t.evaluate, *(t.backup or ())[1:])],
                timeout=timeout_s,
                return_when="FIRST_COMPLETED",
            )

    def harvest(self) -> Harvest:
        """Collect finished, failed and timed-out groups (never blocks)."""
        out = Harvest()
        now = self._clock()
        still: list[Task] = []
        for t in self._tasks:
            self._settle(t)
            status = t.evaluate.status
            if status == "finished":
                if t.tag == "train":
                    self.stragglers.finished(now - t.submitted)
                try:
                    results = t.evaluate.result(timeout=30)
                except Exception as exc:  # lost between status and result: a failure
                    self._fail_all(out, t, *self._failure(t, exc))
                    continue
                for g, r in zip(t.groups, results, strict=True):
                    if isinstance(r, GroupError):
                        fut = t.rollout if r.component == "rollout" else t.evaluate
                        failure = TaskFailure(r.component, str(fut.key), g.group_id, t.tag, r.error)
                        out.failed.append((g, failure))
                    else:
                        out.done.append((g, r))
            elif status in ("error", "cancelled"):
                self._fail_all(out, t, *self._failure(t, None))
            elif now - t.submitted > self.task_timeout_s:
                component = "rollout" if t.rollout.status != "finished" else "evaluator"
                key = t.rollout.key if component == "rollout" else t.evaluate.key
                self.client.cancel([t.rollout, t.evaluate, *(t.backup or ())])
                self._fail_all(
                    out,
                    t,
                    component,
                    str(key),
                    f"still running after runtime_monitor.task_timeout_s={self.task_timeout_s:g}s; "
                    "cancelled (a hung inference service or evaluator?)",
                )
            else:
                still.append(t)
        kept = {id(t) for t in still}
        for t in self._tasks:
            if id(t) not in kept:
                t.release()
        self._tasks = still
        warn_failures([f for _, f in out.failed])
        if self.stragglers.enabled:
            out.backed_up = self._back_up(self.stragglers.due(still, now))
        return out

    @staticmethod
    def _fail_all(out: Harvest, t: Task, component: str, key: str, error: str) -> None:
        """Every group of ``t`` failed in ``component`` (future ``key``) with ``error``."""
        for g in t.groups:
            out.failed.append((g, TaskFailure(component, key, g.group_id, t.tag, error)))

    def _failure(self, t: Task, exc: BaseException | None) -> tuple[str, str, str]:
        """(component, future key, error) of a task whose futures failed as a whole."""
        for component, fut in (("rollout", t.rollout), ("evaluator", t.evaluate)):
            if fut.status in ("error", "cancelled"):
                return component, str(fut.key), _describe(exc or _exception(fut))
        return "evaluator", str(t.evaluate.key), _describe(exc or "lost")

    # -- stopping ---------------------------------------------------------------
    def drain(self, timeout_s: float) -> Harvest:
        """Wait (bounded) until nothing is running; what finished, failed or timed out."""
        total = Harvest()
        deadline = self._clock() + timeout_s
        while self._tasks:
            self.wait_any(min(1.0, max(0.01, deadline - self._clock())))
            h = self.harvest()
            total.done += h.done
            total.failed += h.failed
            if self._tasks and self._clock() >= deadline:
                for t in self._tasks:
                    self.client.cancel([t.rollout, t.evaluate, *(t.backup or ())])
                    self._fail_all(total, t, "rollout", str(t.rollout.key), "drain timeout")
                    t.release()
                self._tasks = []
        return total

    def cancel_all(self) -> list[InFlight]:
        """Cancel every running task; returns their groups (not rolled out)."""
        tasks, self._tasks = self._tasks, []
        futures = [f for t in tasks for f in (t.rollout, t.evaluate, *(t.backup or ()))]
        if futures:
            try:
                self.client.cancel(futures)
            except Exception as exc:  # the cluster may already be gone
                logger.debug("cancel: %s", exc)
        for t in tasks:
            t.release()
        return [g for t in tasks for g in t.groups]


def _suffix(groups: list[list[dict[str, Any]]], tag: str) -> str:
    """A task's key suffix: its first group, how many more, its tag, a unique part."""
    first = int(groups[0][0]["group_id"])
    more = f"+{len(groups) - 1}" if len(groups) > 1 else ""
    return f"g{first}{more}-{tag}-{uuid.uuid4().hex[:8]}"


def _other_workers(dask_scheduler: Any, key: str, need: dict[str, float] | None) -> list[str]:
    """On the scheduler: the workers offering ``need`` other than the one processing
    ``key`` (all of them when it is not processing)."""
    ts = dask_scheduler.tasks.get(key)
    busy = ts.processing_on.address if ts is not None and ts.processing_on else None
    return [
        addr
        for addr, ws in dask_scheduler.workers.items()
        if addr != busy and offers(ws.resources, need)
    ]


def _exception(fut: Any) -> Any:
    try:
        return fut.exception(timeout=10)
    except Exception as exc:
        return exc


def _describe(err: Any) -> str:
    return describe(err) if isinstance(err, BaseException) else str(err)
