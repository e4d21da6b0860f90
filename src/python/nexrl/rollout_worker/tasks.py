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
from pathlib import Path
from typing import Any

from nexrl.pool.config import PoolConfig
from nexrl.rollout_worker.base import BaseRolloutWorker, Episode
from nexrl.types import Trajectory

__all__ = [
    "GroupError",
    "GroupSummary",
    "RolloutSpec",
    "evaluate_groups_task",
    "rollout_groups_task",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a rollout or evaluator future needs (small and picklable).

    Attributes:
        worker_type: built-in worker ('simple', 'agent', 'openai_agent').
        custom_worker: ``(file, class)`` of a custom rollout worker, or None.
        evaluator: ``(file, class)`` of the recipe's evaluator, or
            ``("nexrl.evaluators", name)`` for a named one.
        evaluator_options: a named evaluator's options, as JSON.
        roots: folders relative recipe paths are searched in (absolute).
        base_urls: the inference service's replicas.
        served_model_name / api_key: sent with every request.
        timeout_s / max_retries: per inference request (openai client).
        sampling: OpenAI sampling parameters (temperature, top_p, max_tokens).
        prompt_key: data column holding the prompt.
        pool: the trajectory pool config (store resolved).
        group_requests: one request with ``n`` per prompt group
            (``rollout_worker.one_request_per_group``; the 'simple' worker).
        batch_requests: chat calls made at the same moment go in one batch request
            (``rollout_worker.batch_requests``; the embedded server only).
        versions_from_pool: the engines do not report policy versions (``base_urls``
            replicas: vLLM, SGLang): tag each reply with the version the controller
            last loaded everywhere, read from the pool's weight-sync record when the
            request starts (``InferenceClient``'s ``version_source``).
    """

    worker_type: str
    evaluator: tuple[str, str]
    roots: tuple[str, ...]
    base_urls: tuple[str, ...]
    served_model_name: str
    sampling: tuple[tuple[str, Any], ...]
    pool: PoolConfig
    custom_worker: tuple[str, str] | None = None
    api_key: str = "EMPTY"
    timeout_s: float = 60.0
    max_retries: int = 2
    prompt_key: str = "prompt"
    agent_config: str | None = None  # absolute path, for worker_type 'agent'
    agent_trajectory: str = "per_call"
    agent_entrypoint: str | None = None  # 'file.py:function', for worker_type 'openai_agent'
    agent_timeout_s: float = 300.0
    seed: int | None = None  # per-request sampling seeds (BaseRolloutWorker.request_seed)
    versions_from_pool: bool = False
    group_requests: bool = True
    batch_requests: bool = False
    evaluator_options: str = "{}"

    def with_sampling(self, **overrides: Any) -> RolloutSpec:
        from dataclasses import replace

        return replace(self, sampling=tuple({**dict(self.sampling), **overrides}.items()))

    def with_base_urls(self, urls: list[str]) -> RolloutSpec:
        from dataclasses import replace

        return replace(self, base_urls=tuple(urls))


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


_CACHE: dict[tuple[str, ...], Any] = {}
_CACHE_LOCK = threading.Lock()


def _cached(key: tuple[str, ...], build: Any) -> Any:
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        return _CACHE[key]


def _load(spec: tuple[str, str], roots: tuple[str, ...], field_name: str) -> Any:
    from nexrl.plugins import load_object

    return load_object(spec[0], spec[1], [Path(r) for r in roots], field_name)


def worker_class(spec: RolloutSpec) -> type[BaseRolloutWorker]:
    """The rollout worker class the recipe names (custom class or built-in type)."""
    custom = spec.custom_worker
    if custom is not None:
        cls = _cached(
            ("worker", *custom, *spec.roots),
            lambda: _load(custom, spec.roots, "rollout_worker.custom_worker"),
        )
        if not (isinstance(cls, type) and issubclass(cls, BaseRolloutWorker)):
            raise TypeError(
                f"rollout_worker.custom_worker: {cls!r} is not a subclass "
                "of nexrl.rollout_worker.base.BaseRolloutWorker"
            )
        return cls
    from nexrl.rollout_worker.agent import AgentRolloutWorker
    from nexrl.rollout_worker.openai_agent import OpenAIAgentWorker
    from nexrl.rollout_worker.simple import SimpleRolloutWorker

    builtin: dict[str, type[BaseRolloutWorker]] = {
        "simple": SimpleRolloutWorker,
        "agent": AgentRolloutWorker,
        "openai_agent": OpenAIAgentWorker,
    }
    if spec.worker_type not in builtin:
        raise ValueError(
            f"rollout_worker.type: {spec.worker_type!r} is not available in this build "
            f"(available: {', '.join(builtin)})"
        )
    return builtin[spec.worker_type]


def evaluator(spec: RolloutSpec) -> Any:
    """The recipe's evaluator, one instance per process (a named one built with its
    options and the run's inference service as its context)."""
    from nexrl.evaluators.registry import NAMED_SOURCE, EvaluatorContext, build

    if spec.evaluator[0] == NAMED_SOURCE:
        context = EvaluatorContext(spec.base_urls, spec.served_model_name, spec.api_key)
        return _cached(
            ("evaluator", *spec.evaluator, spec.evaluator_options),
            lambda: build(spec.evaluator[1], json.loads(spec.evaluator_options), context),
        )
    return _cached(
        ("evaluator", *spec.evaluator, *spec.roots),
        lambda: _load(spec.evaluator, spec.roots, "rollout_worker.evaluator")(),
    )


def _worker(spec: RolloutSpec, client: Any, recorder: Any = None) -> BaseRolloutWorker:
    cls = worker_class(spec)
    if _runs_openai_agent(spec):
        from nexrl.rollout_worker.openai_agent import OpenAIAgentWorker, load_entrypoint

        entry = spec.agent_entrypoint
        assert entry is not None
        agent_fn = _cached(
            ("openai_agent", entry, *spec.roots),
            lambda: load_entrypoint(entry, [Path(r) for r in spec.roots]),
        )
        return OpenAIAgentWorker(
            client,
            evaluator(spec),
            dict(spec.sampling),
            spec.prompt_key,
            agent=agent_fn,
            recorder=recorder,
            model=spec.served_model_name,
            timeout_s=spec.agent_timeout_s,
            trajectory_mode=spec.agent_trajectory,
            seed=spec.seed,
        )
    if spec.worker_type == "agent" and spec.custom_worker is None:
        from nexrl.rollout_worker.agent import AgentRolloutWorker, load_agent_config

        assert spec.agent_config is not None
        agent = _cached(("agent", spec.agent_config), lambda: load_agent_config(spec.agent_config))
        return AgentRolloutWorker(
            client,
            evaluator(spec),
            dict(spec.sampling),
            spec.prompt_key,
            agent=agent,
            trajectory_mode=spec.agent_trajectory,
            seed=spec.seed,
        )
    worker = cls(client, evaluator(spec), dict(spec.sampling), spec.prompt_key)
    worker.seed = spec.seed  # set after construction: custom __init__s need not forward it
    from nexrl.rollout_worker.simple import SimpleRolloutWorker

    if isinstance(worker, SimpleRolloutWorker):
        worker.group_requests = spec.group_requests
        worker.choice_seeds = not spec.versions_from_pool  # the embedded server's own
    return worker


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
        from nexrl.inference import InferenceClient

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
            self.clients[key] = InferenceClient(
                list(spec.base_urls),
                spec.served_model_name,
                api_key=spec.api_key,
                timeout_s=spec.timeout_s,
                max_retries=spec.max_retries,
                version_source=loaded_version(spec.pool) if spec.versions_from_pool else None,
                batch_calls=spec.batch_requests,
            )
        return self.clients[key]

    def recorder(self, spec: RolloutSpec) -> Any:
        """The process's recording agent service for ``spec``'s inference service
        (``openai_agent``); started on first use, from the calling (task) thread."""
        from nexrl.rollout_worker.openai_agent.recorder import Recorder

        key = (
            "recorder",
            spec.base_urls,
            spec.served_model_name,
            spec.api_key,
            spec.timeout_s,
            spec.max_retries,
        )
        with _CACHE_LOCK:
            if key not in self.clients:
                self.clients[key] = Recorder(
                    spec.base_urls,
                    spec.served_model_name,
                    timeout_s=spec.timeout_s,
                    max_retries=spec.max_retries,
                    api_key=spec.api_key,
                )
            return self.clients[key]


def loaded_version(pool: PoolConfig) -> Any:
    """A function returning the policy version the controller last loaded on every
    inference replica: ``end_weight_sync``'s version in the pool's weight-sync record
    (during a reload it is still the old one)."""
    from nexrl.pool.kv import open_kv
    from nexrl.pool.writer import read_weight_sync

    kv = open_kv(pool.store, dict(pool.storage_options) or None)

    def version() -> int | None:
        v = read_weight_sync(kv).get("version")
        return None if v is None else int(v)

    return version


def _runs_openai_agent(spec: RolloutSpec) -> bool:
    return spec.worker_type == "openai_agent" and spec.custom_worker is None


_LOOP: _LoopThread | None = None


def _loop() -> _LoopThread:
    global _LOOP
    with _CACHE_LOCK:
        if _LOOP is None or not _LOOP.thread.is_alive():
            _LOOP = _LoopThread()
        return _LOOP


def _rollout_limit(spec: RolloutSpec) -> float:
    """Seconds one group's rollout may take. Each model call is bounded by timeout_s
    (retries included); the margin covers multi-call episodes queued behind each other
    on a busy service. An agent function's episode is bounded by agent_timeout_s (its
    own AgentError first)."""
    limit = spec.timeout_s * 4 + 30.0
    if _runs_openai_agent(spec):
        limit = max(limit, spec.agent_timeout_s + 30.0)
    return limit


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
    raised ``1 + retries`` times (each try bounded by ``_rollout_limit``). One group's
    failure never fails the others."""
    runner = _loop()
    recorder = runner.recorder(spec) if _runs_openai_agent(spec) else None
    limit = _rollout_limit(spec)

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
        trajectories.extend(worker.score(out) if isinstance(out, Episode) else [out])
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
        from nexrl.pool import get_writer

        get_writer(spec.pool).append(trajectories)
    return [s if isinstance(s, GroupError) else _summary(s, commit) for s in scored]


def describe(err: BaseException) -> str:
    """``Type: message`` of an exception (one line for the controller's failure)."""
    return f"{type(err).__name__}: {err}"
