"""``AgentRolloutWorker`` (``rollout_worker.type: agent``): a multi-turn tool-calling
agent from ``agent_config.yaml``.

One episode::

    messages = [system_prompt] + format_task_query(row)
    repeat up to max_turns:
        reply = chat(messages, tools)                       # OpenAI API, token ids + log-probs
        if reply has tool_calls:  run each tool (timeout; an error becomes the tool's
                                  answer, so the model can react), append the results
        else:                     final answer -> stop
        stop when the next call could not fit max_context_tokens

The evaluator gets ``final_answer`` (the last reply's text, "" if none) and the
``observation`` (every message of the episode). Every model call is kept exactly
as the service sampled it (token in, token out); ``score`` turns the calls into
trajectories: one per call (``per_call``, as NexRL does; every call of the
episode gets the episode's reward, and ``get_train_loss_mask`` can exclude
calls) or one per episode (``episode``: the calls and the tokens between them
— tool results, the template's role markers — in one sequence, those in-between
tokens masked out of the loss). ``episode`` needs each call's prompt to extend
the previous call's prompt + reply token for token; a chat template that
re-renders earlier turns differently is reported, never silently re-tokenized.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nexrl.core.types import Trajectory
from nexrl.core.types.episode import merge_episode
from nexrl.core.types.trace import EpisodeTrace
from nexrl.rollout.worker.agent.config import AgentConfig, ToolSpec
from nexrl.rollout.worker.base import BaseRolloutWorker, Episode, trained_calls
from nexrl.rollout.worker.evaluator import BaseEvaluationTarget

if TYPE_CHECKING:
    from nexrl.rollout.worker.spec import RolloutSpec

__all__ = [
    "TRAJECTORY_MODES",
    "AgentRolloutWorker",
    "check_trajectory_mode",
    "merge_episode",
    "shape_trajectories",
]

log = logging.getLogger(__name__)

TRAJECTORY_MODES = ("per_call", "episode")
# Tools whose failure was shown on the terminal in this process (later ones: the log only).
_WARNED: set[str] = set()


class AgentRolloutWorker(BaseRolloutWorker):
    """See the module doc."""

    def __init__(
        self,
        client: Any,
        evaluator: Any,
        sampling: dict[str, Any],
        prompt_key: str = "prompt",
        *,
        agent: AgentConfig,
        trajectory_mode: str = "per_call",
        seed: int | None = None,
    ) -> None:
        self.trajectory_mode = check_trajectory_mode(trajectory_mode)
        # the agent's llm_config overrides the recipe's sampling settings
        super().__init__(client, evaluator, {**sampling, **agent.llm_config}, prompt_key, seed=seed)
        self.agent = agent

    @classmethod
    def from_spec(
        cls, spec: RolloutSpec, client: Any, evaluator: Any, recorder: Any = None
    ) -> BaseRolloutWorker:
        """The worker of ``rollout_worker.agent_config_path`` (loaded once per process)."""
        if spec.agent_config is None:  # a subclass that builds its own agent
            return super().from_spec(spec, client, evaluator, recorder)
        from nexrl.rollout.worker.agent.config import load_agent_config
        from nexrl.rollout.worker.cache import process_cached

        path = spec.agent_config
        agent = process_cached(("agent", path), lambda: load_agent_config(path))
        return cls(
            client,
            evaluator,
            dict(spec.sampling),
            spec.prompt_key,
            agent=agent,
            trajectory_mode=spec.agent_trajectory,
            seed=spec.seed,
        )

    # -- the episode ----------------------------------------------------------
    async def run_agent(self, item: dict[str, Any]) -> Episode:
        agent = self.agent
        messages: list[dict[str, Any]] = []
        if agent.system_prompt:
            messages.append({"role": "system", "content": agent.system_prompt})
        messages += self.format_task_query(item["data_item"])
        tools = [t.openai() for t in agent.tools] or None
        calls, infos = [], []
        trace = EpisodeTrace()  # every model and tool call, as spans (nexrl.core.types.trace)
        final, finish = "", "max_turns"
        max_tokens = int(self.sampling.get("max_tokens", 64))
        for turn in range(agent.max_turns):
            start = trace.now()
            (gen,) = await self.client.chat(
                messages, tools=tools, n=1, **self.sampling, **self.request_seed(item, turn)
            )
            trace.llm(
                start,
                model=str(getattr(self.client, "model", "")),
                prompt_tokens=len(gen.prompt_token_ids),
                completion_tokens=len(gen.token_ids),
                finish_reason=gen.finish_reason,
                tool_calls=len(gen.tool_calls or []),
            )
            calls.append(gen)
            used = len(gen.prompt_token_ids) + len(gen.token_ids)
            info: dict[str, Any] = {"turn": turn, "tool_calls": gen.tool_calls, "tokens": used}
            infos.append(info)
            reply: dict[str, Any] = {"role": "assistant", "content": gen.text}
            if not gen.tool_calls:
                messages.append(reply)
                final, finish = gen.text or "", "answer"
                break
            reply["tool_calls"] = gen.tool_calls
            messages.append(reply)
            for call in gen.tool_calls:
                start = trace.now()
                result, error = await self._run_tool(call)
                fn = call.get("function") or {}
                trace.tool(
                    start,
                    name=str(fn.get("name", "")),
                    arguments=_arguments(fn.get("arguments")),
                    result=result,
                    error=error,
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id", ""), "content": result}
                )
            info["tool_results"] = [m["content"] for m in messages[-len(gen.tool_calls) :]]
            if used + max_tokens > agent.max_context_tokens:
                finish = "context_limit"
                break
        target = BaseEvaluationTarget(final_answer=final, observation=messages)
        for info in infos:
            info["finish"] = finish
        return Episode(item=item, target=target, calls=calls, infos=infos, trace=trace.spans)

    async def _run_tool(self, call: dict[str, Any]) -> tuple[str, str | None]:
        """``(what the model gets, the error or None)``: a failure goes back to the model
        as an ``error: ...`` message, and into the trace."""
        text = await self._tool_text(call)
        return text, (text if text.startswith("error: ") else None)

    async def _tool_text(self, call: dict[str, Any]) -> str:
        fn = call.get("function") or {}
        name = str(fn.get("name", ""))
        tool = self.agent.tool(name)
        if tool is None:
            names = ", ".join(t.name for t in self.agent.tools) or "none"
            return f"error: unknown tool {name!r} (available: {names})"
        raw = fn.get("arguments") or "{}"
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return f"error: arguments of {name} are not JSON: {raw!r}"
        if not isinstance(args, dict):
            return f"error: arguments of {name} must be a JSON object, got {raw!r}"
        return await self._call_tool(tool, args)

    async def _call_tool(self, tool: ToolSpec, args: dict[str, Any]) -> str:
        timeout = self.agent.tool_timeout_s
        try:
            result = await asyncio.wait_for(in_own_thread(lambda: tool.function(**args)), timeout)
        except TimeoutError:
            _warn(
                tool.name,
                "tool %s did not answer within %gs (tool_timeout_s); the model got an error "
                "and the call's thread is left running",
                tool.name,
                timeout,
            )
            return f"error: tool {tool.name} did not answer within {timeout:g}s"
        except Exception as exc:  # the tool's own error goes back to the model
            _warn(tool.name, "tool %s raised; the model got an error", tool.name, exc=exc)
            return f"error: {tool.name} raised {type(exc).__name__}: {exc}"
        if isinstance(result, str):
            return result
        try:
            return json.dumps(result)
        except (TypeError, ValueError) as exc:  # e.g. a numpy number, a set, an object
            what = type(result).__name__
            _warn(
                tool.name,
                "tool %s returned %s, which is not JSON: return a str or a JSON value "
                "(dict, list, str, int, float, bool, None); the model got an error",
                tool.name,
                what,
                exc=exc,
            )
            return f"error: {tool.name} returned {what}, which is not JSON"

    # -- trajectories ---------------------------------------------------------
    def score(self, episode: Episode) -> list[Trajectory]:
        return shape_trajectories(self.call_trajectories(episode), episode, self.trajectory_mode)


def _arguments(raw: Any) -> Any:
    """A tool call's arguments for the trace: the parsed object when they are JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def in_own_thread(fn: Callable[[], Any]) -> asyncio.Future[Any]:
    """``fn()`` in a daemon thread of its own, as a future of the running loop. A call that
    hangs keeps its own thread only (Python cannot stop a thread): with a shared pool of
    threads, once the pool was full of hung calls every later call would queue behind them
    and time out without ever running."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # cancelled meanwhile (timed out)
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    def target() -> None:
        result: Any = None
        exc: BaseException | None = None
        try:
            result = fn()
        except BaseException as e:  # handed to the awaiting episode
            exc = e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=target, name="nexrl-tool", daemon=True).start()
    return future


def _warn(tool: str, message: str, *args: Any, exc: BaseException | None = None) -> None:
    """A tool's failure: a warning (one line on the terminal) the first time for each tool
    in this process, the log file only after that; the traceback always in the log."""
    level = logging.INFO if tool in _WARNED else logging.WARNING
    _WARNED.add(tool)
    log.log(level, message, *args, exc_info=exc)


def check_trajectory_mode(mode: str) -> str:
    """``mode`` if it is one of ``TRAJECTORY_MODES``, else a ValueError listing them."""
    if mode not in TRAJECTORY_MODES:
        raise ValueError(f"trajectory_mode must be one of {TRAJECTORY_MODES}, not {mode!r}")
    return mode


def shape_trajectories(per_call: list[Trajectory], episode: Episode, mode: str) -> list[Trajectory]:
    """``agent_trajectory``: every call's trajectory (``call_trajectories``, masked calls
    included) as the trained calls alone (``per_call``, ``trained_calls``) or merged into
    one sequence, masked calls with loss mask 0 (``episode``)."""
    if mode == "per_call" or len(per_call) <= 1:
        return trained_calls(per_call)
    return [merge_episode(per_call, episode)]
