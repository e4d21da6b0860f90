"""``OpenAIAgentWorker`` (``rollout_worker.type: openai_agent``): an unmodified agent
function as a rollout worker.

One episode::

    session = a fresh id
    answer  = agent(task, base_url=<the process's Recorder>, api_key=session, model=...)
              (async: awaited on the rollout loop; sync: in a thread of its own)
    calls   = the session's recorded model calls (token ids, log-probs, policy
              version exactly as the inference service returned them)

The evaluator gets ``final_answer=answer`` (and the calls' replies as the
``observation``) in the evaluator future, as for every worker; ``score`` makes
one trajectory per call or one merged episode (``rollout_worker.agent_trajectory``,
the config-defined agent's rules). An agent that raises, returns no string, makes
no model call or runs past ``agent_timeout_s`` fails the rollout with an
``AgentError`` naming it: the group is retried and counted as a failed rollout.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.types import Trajectory
from nexrl.rollout.worker.agent.worker import check_trajectory_mode, shape_trajectories
from nexrl.rollout.worker.base import BaseRolloutWorker, Episode
from nexrl.rollout.worker.evaluator import BaseEvaluationTarget
from nexrl.rollout.worker.openai_agent.entrypoint import AgentEntrypoint, AgentError

if TYPE_CHECKING:
    from nexrl.rollout.worker.openai_agent.recorder import Recorder
    from nexrl.rollout.worker.spec import RolloutSpec

__all__ = ["OpenAIAgentWorker"]

# Sync agents run here, one thread per episode: a hung agent costs its thread only.
_AGENT_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="nexrl-agent")


class OpenAIAgentWorker(BaseRolloutWorker):
    """See the module doc. ``recorder`` is None where the worker only scores."""

    def __init__(
        self,
        client: Any,
        evaluator: Any,
        sampling: dict[str, Any],
        prompt_key: str = "prompt",
        *,
        agent: AgentEntrypoint,
        recorder: Recorder | None = None,
        model: str = "",
        timeout_s: float = 300.0,
        trajectory_mode: str = "per_call",
        seed: int | None = None,
    ) -> None:
        self.trajectory_mode = check_trajectory_mode(trajectory_mode)
        super().__init__(client, evaluator, sampling, prompt_key, seed=seed)
        self.agent, self.recorder, self.model = agent, recorder, model
        self.timeout_s = timeout_s

    @classmethod
    def from_spec(
        cls, spec: RolloutSpec, client: Any, evaluator: Any, recorder: Any = None
    ) -> BaseRolloutWorker:
        """The worker of ``rollout_worker.agent_entrypoint`` (loaded once per process),
        recording through the process's ``recorder``."""
        entry = spec.agent_entrypoint
        if entry is None:  # a subclass that brings its own agent
            return super().from_spec(spec, client, evaluator, recorder)
        from nexrl.rollout.worker.cache import process_cached
        from nexrl.rollout.worker.openai_agent.entrypoint import load_entrypoint

        agent_fn = process_cached(
            ("openai_agent", entry, *spec.roots),
            lambda: load_entrypoint(entry, [Path(r) for r in spec.roots]),
        )
        return cls(
            client,
            evaluator,
            dict(spec.sampling),
            spec.prompt_key,
            agent=agent_fn,
            recorder=recorder,
            model=spec.served_model_name,
            timeout_s=spec.agent_timeout_s,
            trajectory_mode=spec.agent_trajectory,
            seed=spec.seed,
        )

    @classmethod
    def needs_recorder(cls, spec: RolloutSpec) -> bool:
        return spec.agent_entrypoint is not None

    @classmethod
    def rollout_limit_s(cls, spec: RolloutSpec) -> float:
        """An agent function's episode is bounded by agent_timeout_s (its own
        AgentError first)."""
        limit = super().rollout_limit_s(spec)
        return max(limit, spec.agent_timeout_s + 30.0) if cls.needs_recorder(spec) else limit

    async def run_agent(self, item: dict[str, Any]) -> Episode:
        recorder = self.recorder
        if recorder is None:
            raise RuntimeError("OpenAIAgentWorker needs a Recorder to run episodes")
        sid = f"nexrl-{uuid.uuid4().hex}"
        recorder.open(sid, lambda call: self.request_seed(item, call).get("seed"))
        try:
            answer = await self._run(copy.deepcopy(item["data_item"]), recorder.base_url, sid)
            calls = recorder.take(sid, self.agent.name)
        except BaseException:
            recorder.discard(sid)
            raise
        finally:
            recorder.close(sid)
        gens = [g for c in calls for g in c.generations]
        observation = [{"role": "assistant", "content": g.text or ""} for g in gens]
        infos = [
            {"call": k, "session": sid, "finish_reason": g.finish_reason, "finish": "answer"}
            for k, g in enumerate(gens)
        ]
        target = BaseEvaluationTarget(final_answer=answer, observation=observation)
        trace = recorder.trace(calls, self.model)
        return Episode(item=item, target=target, calls=gens, infos=infos, trace=trace)

    async def _run(self, task: dict[str, Any], base_url: str, sid: str) -> str:
        name, timeout = self.agent.name, self.timeout_s
        try:
            answer = await asyncio.wait_for(self._call(task, base_url, sid), timeout)
        except TimeoutError:
            raise AgentError(
                f"agent {name} did not return within {timeout:g}s (rollout_worker.agent_timeout_s)"
            ) from None
        if not isinstance(answer, str):
            raise AgentError(
                f"agent {name} returned {type(answer).__name__}, not str (the final answer "
                "the evaluator scores)"
            )
        return answer

    async def _call(self, task: dict[str, Any], base_url: str, sid: str) -> Any:
        kwargs = {"base_url": base_url, "api_key": sid, "model": self.model}
        try:
            if self.agent.is_async:
                return await self.agent.fn(task, **kwargs)
            call = functools.partial(self.agent.fn, task, **kwargs)
            return await asyncio.get_running_loop().run_in_executor(_AGENT_POOL, call)
        except Exception as exc:  # the agent's own error, named
            raise AgentError(f"agent {self.agent.name} raised {type(exc).__name__}: {exc}") from exc

    def score(self, episode: Episode) -> list[Trajectory]:
        per_call = self.call_trajectories(episode)
        for t in per_call:
            t.extra_info["session"] = episode.infos[0]["session"]
        return shape_trajectories(per_call, episode, self.trajectory_mode)
