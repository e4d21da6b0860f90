"""The agent service's HTTP app (FastAPI).

Routes:

* ``POST /v1/chat/completions``, ``POST /v1/completions``: forwarded to the
  inference service; each call's token ids, log-probs, policy version and
  finish reason are recorded under the session id (``X-NexRL-Session`` header,
  else the API key). The agent gets a plain OpenAI reply. ``stream: true`` is
  refused (400). An upstream error reply is passed through unchanged (and not
  recorded).
* ``GET /v1/models``: forwarded.
* ``POST /v1/sessions/{id}/reward``: ends the session; its calls become
  trajectories, appended to the pool in one commit (``RewardReport``).
* ``GET /v1/sessions/{id}``, ``DELETE /v1/sessions/{id}``: look at / discard a session.
* ``POST /v1/trajectories``: push already built trajectories (validated, one commit).
* ``GET /health``.

Authentication (``ServiceConfig.token`` set; required to bind beyond loopback):
every request, ``/health`` included, proves the token in one of three ways,
else 401:

* ``Authorization: Bearer <token>`` (pushes, reward reports, health);
* ``Authorization: Bearer <token>:<session id>``: an unmodified agent, which can
  only set its API key, uses ``OpenAI(api_key=f"{token}:{session}")``; the
  session id is what follows the first ``<token>:``;
* ``X-NexRL-Token: <token>`` (with the session id as the API key, or in
  ``X-NexRL-Session``).

Every error is ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nexrl.core.pool import PoolDataError, PoolWriter
from nexrl.core.types import Trajectory
from nexrl.core.util.auth import BearerAuth, bearer_key, same_token
from nexrl.rollout.agent_service.config import ServiceConfig
from nexrl.rollout.agent_service.errors import ServiceError
from nexrl.rollout.agent_service.recording import (
    POLICY_VERSION_HEADER,
    parse_reply,
    prepare_request,
    restore_reply,
    tool_messages,
)
from nexrl.rollout.agent_service.records import validate_records
from nexrl.rollout.agent_service.rewards import RewardReport, session_trajectories
from nexrl.rollout.agent_service.sessions import Call, Session, SessionStore, check_session_id
from nexrl.rollout.agent_service.upstream import Upstream

__all__ = ["SESSION_HEADER", "TOKEN_HEADER", "authorized", "create_app"]

log = logging.getLogger(__name__)
SESSION_HEADER = "X-NexRL-Session"
TOKEN_HEADER = "X-NexRL-Token"


def _key_session(key: str, token: str | None) -> str | None:
    """The session id an API key carries: the key itself, or with a token, what follows
    ``<token>:`` (None: the key is the bare token, or does not start with it)."""
    if not token:
        return key
    n = len(token)
    if len(key) > n + 1 and key[n] == ":" and same_token(key[:n], token):
        return key[n + 1 :]
    return None


def authorized(headers: Any, token: str) -> bool:
    """Whether a request proves ``token`` (see the module doc)."""
    given = headers.get(TOKEN_HEADER)
    if given is not None:
        return same_token(given.strip(), token)
    key = bearer_key(headers)
    if key is None:
        return False
    return same_token(key, token) or _key_session(key, token) is not None


def session_id(request: Request, token: str | None = None) -> str:
    """The session of a model call: the ``X-NexRL-Session`` header, else the API key
    (with a token: the part after ``<token>:``, unless the token came in ``X-NexRL-Token``)."""
    header = request.headers.get(SESSION_HEADER)
    if header is not None:
        return check_session_id(header.strip(), SESSION_HEADER)
    key = bearer_key(request.headers)
    if key is not None:
        sid = key if request.headers.get(TOKEN_HEADER) is not None else _key_session(key, token)
        if sid is not None:
            return check_session_id(sid, "api_key")
    raise ServiceError(
        400,
        f"no session id: send the {SESSION_HEADER} header or use the session id as the "
        "API key (OpenAI(api_key=session_id, base_url=...); with the service's token: "
        "api_key=f'{token}:{session_id}')",
        param=SESSION_HEADER,
        code="missing_session",
    )


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise ServiceError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


def _report(body: Any) -> RewardReport:
    try:
        return RewardReport.model_validate(body)
    except ValidationError as exc:
        errs = exc.errors(include_url=False)
        first = errs[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or None
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if first.get("type") == "extra_forbidden":
            msg = f"unknown field; the fields are {', '.join(RewardReport.model_fields)}"
        elif first.get("type") == "missing":
            msg = "required"
        raise ServiceError(
            422,
            f"{param}: {msg}" if param else msg,
            param=param,
            code="invalid_reward",
            details=[
                {"param": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg")}
                for e in errs
            ],
        ) from None


class _State:
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.sessions = SessionStore(config.limits)
        self.writer = PoolWriter(config.pool, fsync=config.fsync) if config.pool else None
        self.upstream: Upstream | None = None
        self.counters = {
            "calls_recorded": 0,
            "calls_failed": 0,
            "sessions_rewarded": 0,
            "trajectories_written": 0,
            "trajectories_pushed": 0,
        }

    async def append(self, trajectories: list[Trajectory]) -> None:
        if self.writer is None:
            raise ServiceError(
                409,
                "this agent service has no trajectory pool (it only records model calls, "
                "for nexrl train's openai_agent worker); start it with --pool to write",
                code="no_pool",
            )
        try:
            await asyncio.to_thread(self.writer.append, trajectories)
        except PoolDataError as exc:
            raise ServiceError(422, f"trajectories: {exc}", code="invalid_trajectory") from None
        except OSError as exc:
            raise ServiceError(
                503,
                f"could not write to the trajectory pool {self.config.pool}: {exc}; nothing "
                "was written, retry",
                code="pool_unavailable",
                type="server_error",
            ) from None


def create_app(config: ServiceConfig) -> FastAPI:
    """The agent service for ``config`` (its lifespan opens and closes the upstream client)."""
    state = _State(config)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.upstream = Upstream(
            config.upstream,
            timeout_s=config.upstream_timeout_s,
            max_retries=config.upstream_max_retries,
            api_key=config.upstream_api_key,
        )
        try:
            yield
        finally:
            await state.upstream.aclose()

    app = FastAPI(title="nexrl agent service", lifespan=lifespan)
    app.state.nexrl = state
    if config.token:
        token: str = config.token
        app.add_middleware(
            BearerAuth,
            allowed=lambda headers: authorized(headers, token),
            hint=f"send Authorization: Bearer <token> (an agent: api_key='<token>:<session "
            f"id>'), or the {TOKEN_HEADER} header",
        )

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = ServiceError(exc.status_code, str(exc.detail))
        return JSONResponse(err.body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("agent service: internal error")
        err = ServiceError(500, f"internal error: {exc!r}", type="server_error")
        return JSONResponse(err.body(), status_code=500)

    def upstream() -> Upstream:
        assert state.upstream is not None, "the app's lifespan has not started"
        return state.upstream

    async def proxy(request: Request, path: str, chat: bool) -> JSONResponse:
        body, asked = prepare_request(await _json(request), chat=chat, model=config.model)
        started, clock = time.time(), time.perf_counter()
        sid = session_id(request, config.token)
        session, seq = state.sessions.begin_call(sid)
        call: Call | None = None
        try:
            if config.request_seed is not None and body.get("seed") is None:
                seed = config.request_seed(sid, seq)
                if seed is not None:
                    body["seed"] = seed
            reply = await upstream().request("POST", path, body)
            if reply.status != 200:
                state.counters["calls_failed"] += 1
                content = reply.body if reply.body is not None else {"error": {"message": ""}}
                return JSONResponse(content, status_code=reply.status)
            gens = parse_reply(reply.body, reply.headers, chat=chat)
            call = Call(
                seq,
                "chat" if chat else "completions",
                tuple(gens),
                started=started,
                duration_s=time.perf_counter() - clock,
                tool_results=tool_messages(body),
            )
        finally:
            state.sessions.end_call(session, call)
        state.counters["calls_recorded"] += 1
        headers = {SESSION_HEADER: sid}
        version = reply.headers.get(POLICY_VERSION_HEADER)
        if version is not None:
            headers[POLICY_VERSION_HEADER] = version
        return JSONResponse(restore_reply(reply.body, asked), headers=headers)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        return await proxy(request, "/v1/chat/completions", chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        return await proxy(request, "/v1/completions", chat=False)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        reply = await upstream().request("GET", "/v1/models")
        return JSONResponse(reply.body, status_code=reply.status)

    @app.post("/v1/sessions/{sid}/reward")
    async def reward(sid: str, request: Request) -> dict[str, Any]:
        report = _report(await _json(request))
        session = state.sessions.begin_close(sid)
        try:
            trajectories, mode = session_trajectories(session, report)
        except BaseException:
            state.sessions.finish_close(session, None)
            raise
        await _commit(session, trajectories)
        state.counters["sessions_rewarded"] += 1
        state.counters["trajectories_written"] += len(trajectories)
        first = trajectories[0]
        return {
            "session": sid,
            "trajectories": len(trajectories),
            "trajectory_mode": mode,
            "model_calls": sum(len(c.generations) for c in session.calls),
            "group_id": first.group_id,
            "run_id": first.run_id,
            "reward": first.reward,
        }

    async def _commit(session: Session, trajectories: list[Trajectory]) -> None:
        # The session's fate follows the write, even if this request is cancelled
        # meanwhile: written -> ended; failed -> open again (the report may be retried).
        task = asyncio.ensure_future(state.append(trajectories))

        def settle(t: asyncio.Future[None]) -> None:
            ok = not t.cancelled() and t.exception() is None
            state.sessions.finish_close(session, "rewarded" if ok else None)

        task.add_done_callback(settle)
        await asyncio.shield(task)

    @app.get("/v1/sessions/{sid}")
    async def get_session(sid: str) -> dict[str, Any]:
        return state.sessions.get(sid).summary()

    @app.delete("/v1/sessions/{sid}")
    async def discard(sid: str) -> dict[str, Any]:
        session = state.sessions.begin_close(sid)
        state.sessions.finish_close(session, "discarded")
        return {"session": sid, "discarded": True, "model_calls": len(session.calls)}

    @app.post("/v1/trajectories")
    async def push(request: Request) -> dict[str, Any]:
        trajectories = validate_records(await _json(request))
        await state.append(trajectories)
        state.counters["trajectories_pushed"] += len(trajectories)
        return {
            "written": len(trajectories),
            "group_ids": sorted({t.group_id for t in trajectories}),
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "upstream": upstream().urls,
            "pool": config.pool,
            "open_sessions": len(state.sessions),
            "recorded_tokens": state.sessions.total_tokens,
            "sessions_expired": state.sessions.expired,
            **state.counters,
        }

    return app
