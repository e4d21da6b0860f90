"""The functions Dask workers run for the controller: rollout and evaluator futures.

The controller submits prompt groups in tasks of ``rollout_worker.groups_per_task``
groups, two futures per task::

    outputs   = client.submit(rollout_groups_task, spec, groups, retries, key="rollout-g<first>…")
    summaries = client.submit(evaluate_groups_task, spec, outputs, commit, key="evaluate-g<first>…")

``rollout_groups_task`` runs the rollout worker's ``run_group`` on each group's
items, all groups at once (``run_agent`` for every item concurrently, or one
request per group; one event loop, one inference client per process), and
tries a failing group again up to ``retries`` times; ``evaluate_groups_task``
scores each group with the recipe's evaluator and appends the scored groups'
trajectories to the zarr pool in one commit, so a group is in the pool whole or
not at all. A group that still failed comes back as a ``GroupError`` without
failing its task's other groups. Only small ``GroupSummary`` records travel
back to the controller; the trajectories go to shared storage.

The functions are pure in their inputs (no driver state), so Dask may rerun
them on another worker when one dies. Workers, evaluators and pool writers are
built once per process and cached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from nexrl.core.pool.config import PoolConfig
from nexrl.core.types import Trajectory
from nexrl.core.types.trace import TRACE_KEY
from nexrl.rollout.worker.base import BaseRolloutWorker, Episode
from nexrl.rollout.worker.cache import CACHE_LOCK, process_cached
from nexrl.rollout.worker.registry import worker_class
from nexrl.rollout.worker.spec import RolloutSpec

__all__ = [
    "GroupError",
    "GroupSummary",
    "RolloutSpec",
    "evaluate_groups_task",
    "rollout_groups_task",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupError:
    """A group of a multi-group task whose rollout or scoring failed (after the
    task's retries); the task's other groups are unaffected."""

    component: str  # "rollout" or "evaluator"
    error: str  # "Type: message"


@dataclass
class GroupSummary:
    """What comes back to the controller for one group (no token data)."""

    group_id: int
    rewards: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    response_lengths: list[int] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # means over the trajectories
    evaluator_errors: int = 0
    committed: bool = False
    first_error: str = ""  # the first sample's evaluator error ("Type: message"), if any


def evaluator(spec: RolloutSpec) -> Any:
    """The recipe's evaluator, one instance per process (a named one built with its
    options and the run's inference service as its context)."""
    from nexrl.rollout.evaluators.registry import NAMED_SOURCE, EvaluatorContext, build_evaluator

    source, name = spec.evaluator
    value = name if source == NAMED_SOURCE else f"{source}:{name}"
    context = EvaluatorContext(spec.base_urls, spec.served_model_name, spec.api_key)
    return process_cached(
        ("evaluator", value, spec.evaluator_options, *spec.roots),
        lambda: build_evaluator(value, json.loads(spec.evaluator_options), context, spec.roots),
    )


def _worker(spec: RolloutSpec, client: Any, recorder: Any = None) -> BaseRolloutWorker:
    return worker_class(spec).from_spec(spec, client, evaluator(spec), recorder)


class _LoopThread:
    """One asyncio event loop per worker process, in a daemon thread.

    Rollout tasks running in several Dask worker threads submit their coroutines
    to this loop instead of each calling ``asyncio.run``: every task then shares
    one OpenAI client per service (connections are reused, no client set-up per
    task), and no task thread runs an event loop of its own. Many concurrent
    ``asyncio.run`` loops creating clients deadlocked a worker on this machine
    (threads stuck in ``ThreadPoolExecutor.submit`` inside the openai client, no
    timeout able to fire); with one loop that cannot happen.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="nexrl-rollout-loop", daemon=True
        )
        self.thread.start()
        self.clients: dict[tuple[Any, ...], Any] = {}

    def run(self, coro: Any, timeout_s: float) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout=timeout_s)
        except TimeoutError:
            fut.cancel()
            raise TimeoutError(f"rollout did not finish within {timeout_s:g}s") from None

    def client(self, spec: RolloutSpec) -> Any:
        """The process's inference client for ``spec``'s service (call on the loop)."""
        from nexrl.core.chat import InferenceClient

        key = (
            spec.base_urls,
            spec.served_model_name,
            spec.api_key,
            spec.timeout_s,
            spec.max_retries,
            spec.pool.store if spec.versions_from_pool else None,
            spec.batch_requests,
        )
        if key not in self.clients:
            loaded, newest = pool_versions(spec.pool) if spec.versions_from_pool else (None, None)
            self.clients[key] = InferenceClient(
                list(spec.base_urls),
                spec.served_model_name,
                api_key=spec.api_key,
                timeout_s=spec.timeout_s,
                max_retries=spec.max_retries,
                version_source=loaded,
                version_ceiling=newest,
                batch_calls=spec.batch_requests,
            )
        return self.clients[key]

    def recorder(self, spec: RolloutSpec) -> Any:
        """The process's recording agent service for ``spec``'s inference service
        (``openai_agent``); started on first use, from the calling (task) thread."""
        from nexrl.rollout.worker.openai_agent.recorder import Recorder

        key = (
            "recorder",
            spec.base_urls,
            spec.served_model_name,
            spec.api_key,
            spec.timeout_s,
            spec.max_retries,
        )
        with CACHE_LOCK:
            if key not in self.clients:
                self.clients[key] = Recorder(
                    spec.base_urls,
                    spec.served_model_name,
                    timeout_s=spec.timeout_s,
                    max_retries=spec.max_retries,
                    api_key=spec.api_key,
                )
            return self.clients[key]


def pool_versions(pool: PoolConfig) -> tuple[Any, Any]:
    """Two functions over the pool's weight-sync record: the policy version the
    controller last loaded on every replica (``end_weight_sync``'s; during a reload
    still the old one), read when a request starts, and the newest version a replica
    may be serving (during a reload, the one being loaded), read when its reply
    arrives. A request between the two straddled an update."""
    from nexrl.core.pool.kv import open_kv
    from nexrl.core.pool.writer import read_weight_sync

    kv = open_kv(pool.store, dict(pool.storage_options) or None)

    def loaded() -> int | None:
        v = read_weight_sync(kv).get("version")
        return None if v is None else int(v)

    def newest() -> int | None:
        state = read_weight_sync(kv)
        v = state.get("target_version") if state.get("active") else None
        v = state.get("version") if v is None else v
        return None if v is None else int(v)

    return loaded, newest


_LOOP: _LoopThread | None = None


def _loop() -> _LoopThread:
    global _LOOP
    with CACHE_LOCK:
        if _LOOP is None or not _LOOP.thread.is_alive():
            _LOOP = _LoopThread()
        return _LOOP


async def _rollout_group(
    spec: RolloutSpec, items: list[dict[str, Any]], runner: _LoopThread, recorder: Any
) -> list[Episode | Trajectory]:
    worker = _worker(spec, runner.client(spec), recorder)
    name = type(worker).__name__
    if type(worker).scores_separately():
        episodes: list[Episode | Trajectory] = [*await worker.run_group(items)]
        _expect(episodes, Episode, f"{name}.run_agent (or run_group)", "an Episode")
        return episodes
    scored = await asyncio.gather(*(worker.rollout(i) for i in items))
    for ts in scored:
        _expect(ts, Trajectory, f"{name}.rollout", "a list of Trajectory")
    return [t for ts in scored for t in ts]


def _expect(values: Any, kind: type, method: str, wanted: str) -> None:
    """A custom worker's hook that returned the wrong thing: a TypeError naming it."""
    listed = isinstance(values, list | tuple)
    bad = [v for v in values if not isinstance(v, kind)] if listed else [values]
    if bad:
        raise TypeError(
            f"{method} returned {type(bad[0]).__name__}, not {wanted} "
            "(rollout_worker.custom_worker; see docs/train-your-own-task.md, section 5)"
        )


def rollout_groups_task(
    spec: RolloutSpec, groups: list[list[dict[str, Any]]], retries: int = 0
) -> list[list[Episode | Trajectory] | GroupError]:
    """Roll out several groups at once (their model calls run concurrently on the
    process's event loop); per group its outputs, or a ``GroupError`` once its rollout
    raised ``1 + retries`` times (each try bounded by the worker class's ``rollout_limit_s``). One group's
    failure never fails the others."""
    runner = _loop()
    cls = worker_class(spec)
    recorder = runner.recorder(spec) if cls.needs_recorder(spec) else None
    limit = cls.rollout_limit_s(spec)

    async def bounded(items: list[dict[str, Any]]) -> list[Episode | Trajectory]:
        try:
            return await asyncio.wait_for(_rollout_group(spec, items, runner, recorder), limit)
        except TimeoutError:
            raise TimeoutError(f"rollout did not finish within {limit:g}s") from None

    out: list[Any] = [None] * len(groups)
    todo = list(range(len(groups)))
    for attempt in range(retries + 1):

        async def run(todo: list[int] = todo) -> list[Any]:
            return await asyncio.gather(*(bounded(groups[i]) for i in todo), return_exceptions=True)

        results = runner.run(run(), timeout_s=limit + 30.0)
        failed = []
        for i, result in zip(todo, results, strict=True):
            out[i] = result
            if isinstance(result, BaseException):
                failed.append(i)
                logger.warning(
                    "rollout of group %s raised (try %d of %d): %s",
                    groups[i][0].get("group_id"),
                    attempt + 1,
                    retries + 1,
                    describe(result),
                    exc_info=result,
                )
        todo = failed
        if not todo:
            break
    return [GroupError("rollout", describe(r)) if isinstance(r, BaseException) else r for r in out]


def _score(worker: BaseRolloutWorker, outputs: list[Episode | Trajectory]) -> list[Trajectory]:
    trajectories: list[Trajectory] = []
    for out in outputs:
        if not isinstance(out, Episode):
            trajectories.append(out)
            continue
        scored = worker.score(out)
        if out.trace:  # the episode's spans go with each of its trajectories (the pool)
            for t in scored:
                t.extra_info.setdefault(TRACE_KEY, out.trace)
        trajectories.extend(scored)
    if not trajectories:
        raise ValueError("the rollout produced no trajectories")
    return trajectories


def _summary(trajectories: list[Trajectory], committed: bool) -> GroupSummary:
    import numpy as np

    names = sorted({k for t in trajectories for k in t.metrics})
    metrics = {
        n: float(np.mean([t.metrics[n] for t in trajectories if n in t.metrics])) for n in names
    }
    return GroupSummary(
        group_id=trajectories[0].group_id,
        rewards=[t.reward for t in trajectories],
        versions=[t.policy_version for t in trajectories],
        response_lengths=[len(t.response_ids) for t in trajectories],
        metrics=metrics,
        evaluator_errors=int(sum(t.metrics.get("evaluator_error", 0.0) for t in trajectories)),
        committed=committed,
        first_error=next(
            (
                str(t.extra_info["evaluator_error"])
                for t in trajectories
                if t.extra_info.get("evaluator_error")
            ),
            "",
        ),
    )


def evaluate_groups_task(
    spec: RolloutSpec,
    outputs: list[list[Episode | Trajectory] | GroupError],
    commit: bool = True,
) -> list[GroupSummary | GroupError]:
    """Score each group's outputs (``rollout_groups_task``'s), append every scored
    group's trajectories to the pool in one commit when ``commit`` (each group is in
    the pool whole or not at all), and summarise each; a group whose rollout failed or
    whose scoring raised is a ``GroupError``. A failing commit raises (nothing of the
    task is in the pool; Dask runs it again)."""
    worker = _worker(spec, None)
    scored: list[list[Trajectory] | GroupError] = []
    for out in outputs:
        if isinstance(out, GroupError):
            scored.append(out)
            continue
        try:
            scored.append(_score(worker, out))
        except Exception as exc:
            logger.warning("scoring a group raised: %s", describe(exc), exc_info=exc)
            scored.append(GroupError("evaluator", describe(exc)))
    trajectories = [t for s in scored if not isinstance(s, GroupError) for t in s]
    if commit and trajectories:
        from nexrl.core.pool import get_writer

        get_writer(spec.pool).append(trajectories)
    return [s if isinstance(s, GroupError) else _summary(s, commit) for s in scored]


def describe(err: BaseException) -> str:
    """``Type: message`` of an exception (one line for the controller's failure)."""
    return f"{type(err).__name__}: {err}"
