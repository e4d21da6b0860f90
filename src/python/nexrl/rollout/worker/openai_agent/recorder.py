"""``Recorder``: one in-process agent service per worker process, recording only.

It forwards to the recipe's inference service (its replicas, its timeout and
retries) and replaces the model name an agent sends by the served one. It has
no pool: the worker takes a session's recorded calls itself (``take``) and the
evaluator future scores and commits them like any rollout. A session whose
agent sends no ``seed`` gets ``request_seed``-style seeds from the function the
worker registered for it (``open``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nexrl.core.types.trace import llm_span, tool_span
from nexrl.rollout.worker.openai_agent.entrypoint import AgentError

if TYPE_CHECKING:
    from nexrl.rollout.agent_service.sessions import Call

__all__ = ["Recorder"]

SeedFn = Callable[[int], int | None]


class Recorder:
    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: the inference service's (sent upstream; the recorder itself
        binds 127.0.0.1 in this process and needs no token)."""
        from nexrl.core.util.auth import token_of
        from nexrl.rollout.agent_service.config import ServiceConfig
        from nexrl.rollout.agent_service.server import AgentService

        self._seeds: dict[str, SeedFn] = {}
        self._lock = threading.Lock()
        config = ServiceConfig(
            upstream=list(base_urls),
            pool=None,
            model=model,
            upstream_timeout_s=timeout_s,
            upstream_max_retries=max_retries,
            request_seed=self._seed,
            upstream_api_key=token_of(api_key),
        )
        self.service = AgentService(config).start()

    @property
    def base_url(self) -> str:
        """What the agent gets as its OpenAI ``base_url``."""
        return self.service.openai_base_url

    def open(self, sid: str, seed: SeedFn | None = None) -> None:
        """Expect session ``sid`` (its calls are seeded by ``seed(call_index)``)."""
        if seed is not None:
            with self._lock:
                self._seeds[sid] = seed

    def close(self, sid: str) -> None:
        with self._lock:
            self._seeds.pop(sid, None)

    def _seed(self, sid: str, seq: int) -> int | None:
        with self._lock:
            fn = self._seeds.get(sid)
        return fn(seq) if fn is not None else None

    def take(self, sid: str, agent: str) -> list[Call]:
        """End session ``sid`` and return its model calls, in call order."""
        from nexrl.rollout.agent_service.errors import ServiceError

        store = self.service.sessions
        try:
            session = store.begin_close(sid)
        except ServiceError as exc:
            if exc.status == 404:
                raise AgentError(
                    f"agent {agent} made no model call through the base_url and api_key it "
                    "was given (nothing to train on); it must create its client as "
                    "OpenAI(base_url=base_url, api_key=api_key)"
                ) from None
            raise AgentError(f"agent {agent}: {exc.message}") from None
        store.finish_close(session, "taken")
        return list(session.ordered_calls())

    @staticmethod
    def trace(calls: Sequence[Call], model: str) -> list[dict[str, Any]]:
        """The spans of a session (``nexrl.core.types.trace``): each model call, timed by the
        service, and each tool call the model asked for, with the result the agent sent
        back in a later request (the agent runs its tools itself, so a tool span has no
        timing of its own: ``start_s`` is when the result arrived, ``duration_s`` 0; a
        tool call never answered has the error "no result sent back")."""
        if not calls:
            return []
        t0 = min(c.started for c in calls)
        results = {
            r["tool_call_id"]: (c.started, r["content"]) for c in calls for r in c.tool_results
        }
        spans: list[dict[str, Any]] = []
        for c in calls:
            for g in c.generations:
                spans.append(
                    llm_span(
                        c.started - t0,
                        c.duration_s,
                        model=model,
                        prompt_tokens=len(g.prompt_token_ids),
                        completion_tokens=len(g.token_ids),
                        finish_reason=g.finish_reason,
                        tool_calls=len(g.tool_calls or []),
                    )
                )
                for tc in g.tool_calls or []:
                    fn = tc.get("function") or {}
                    at, content = results.get(str(tc.get("id", "")), (c.started, None))
                    error = "no result sent back" if content is None else None
                    if content is not None and content.startswith("error"):
                        error = content
                    spans.append(
                        tool_span(
                            at - t0,
                            0.0,
                            name=str(fn.get("name", "")),
                            arguments=fn.get("arguments"),
                            result=content or "",
                            error=error,
                        )
                    )
        return spans

    def discard(self, sid: str) -> None:
        """Drop what ``sid`` recorded (best effort: a call still running keeps it open
        until the service's session ttl)."""
        from nexrl.rollout.agent_service.errors import ServiceError

        store = self.service.sessions
        with contextlib.suppress(ServiceError):
            store.finish_close(store.begin_close(sid), "discarded")

    def stop(self) -> None:
        self.service.stop()
