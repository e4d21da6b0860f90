"""Every way a call or a report can go wrong gets a clear 4xx/5xx, never a hang."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.util.net import free_port
from nexrl.rollout.agent_service import AgentServiceError, SessionLimits, report_reward
from tests.integration.agent_service._plain_agent import run_agent
from tests.integration.agent_service._pool import read_pool
from tests.integration.agent_service.conftest import ServiceFactory
from tests.integration.inference._helpers import SERVED_NAME

MESSAGES = [{"role": "user", "content": "hi"}]


def client(base_url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=session, timeout=60, max_retries=0)


def one_call(base_url: str, session: str, **kw: Any) -> None:
    create: Any = client(base_url, session).chat.completions.create  # any kwargs, untyped
    create(model=SERVED_NAME, messages=MESSAGES, max_tokens=3, **kw)


def post_reward(url: str, session: str, content: bytes) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/sessions/{session}/reward",
        content=content,
        headers={"content-type": "application/json"},
        timeout=30,
    )


def test_unknown_session_and_double_report(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    with pytest.raises(AgentServiceError, match="unknown session 'nobody'") as unknown:
        report_reward(service.base_url, "nobody", 1.0, 1)
    assert unknown.value.status_code == 404
    one_call(service.openai_base_url, "once")
    report_reward(service.base_url, "once", 1.0, 1)
    with pytest.raises(AgentServiceError, match="already ended: its reward was reported") as twice:
        report_reward(service.base_url, "once", 1.0, 1)
    assert twice.value.status_code == 409
    # a call under an ended session is refused too (one session id per episode)
    with pytest.raises(openai.ConflictError, match="already ended"):
        one_call(service.openai_base_url, "once")
    assert len(read_pool(service.config.pool)) == 1


@pytest.mark.parametrize(
    ("content", "field", "message"),
    [
        (b'{"reward": NaN, "group_id": 1}', "reward", "must be a finite number"),
        (b'{"reward": Infinity, "group_id": 1}', "reward", "must be a finite number"),
        (b'{"reward": "1", "group_id": 1}', "reward", "must be a number"),
        (b'{"reward": 1.0}', "group_id", "required"),
        (b'{"reward": 1.0, "group_id": 1, "rewrd": 2}', "rewrd", "unknown field"),
        (b'{"reward": 1.0, "group_id": 1, "trajectory_mode": "x"}', "trajectory_mode", ""),
        (b"not json", None, "not valid JSON"),
    ],
)
def test_a_bad_reward_report_names_the_field_and_keeps_the_session(
    embedded_server: EmbeddedServer,
    make_service: ServiceFactory,
    content: bytes,
    field: str | None,
    message: str,
) -> None:
    service = make_service(embedded_server.base_url)
    one_call(service.openai_base_url, "s1")
    resp = post_reward(service.base_url, "s1", content)
    err = resp.json()["error"]
    assert resp.status_code == (400 if field is None else 422)
    assert err["param"] == field and message in err["message"]
    if field:
        assert err["message"].startswith(f"{field}: ")
    assert read_pool(service.config.pool) == []
    report_reward(service.base_url, "s1", 1.0, 1)  # the session is intact
    assert len(read_pool(service.config.pool)) == 1


def test_streaming_is_refused_with_a_clear_400(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    with pytest.raises(openai.BadRequestError, match="streaming is not supported"):
        one_call(service.openai_base_url, "s", stream=True)


def test_a_call_without_a_session_id_is_refused(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    body = {"model": SERVED_NAME, "messages": MESSAGES, "max_tokens": 2}
    resp = httpx.post(f"{service.openai_base_url}/chat/completions", json=body, timeout=30)
    assert resp.status_code == 400 and "X-NexRL-Session" in resp.json()["error"]["message"]
    # the header names the session when the API key is shared by all episodes
    resp = httpx.post(
        f"{service.openai_base_url}/chat/completions",
        json=body,
        headers={"Authorization": "Bearer shared-key", "X-NexRL-Session": "by-header"},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.headers["X-NexRL-Session"] == "by-header"
    assert httpx.get(f"{service.base_url}/v1/sessions/by-header", timeout=10).json()["calls"] == 1


def test_upstream_down_is_a_clear_502_not_a_hang(make_service: ServiceFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # a port nobody listens on
    service = make_service(dead)
    with pytest.raises(openai.APIStatusError, match="cannot reach the inference service") as exc:
        one_call(service.openai_base_url, "s")
    assert exc.value.status_code == 502 and dead in exc.value.message
    assert httpx.get(f"{service.base_url}/v1/sessions/s", timeout=10).status_code == 404


def test_upstream_errors_pass_through_and_are_not_recorded(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client(service.openai_base_url, "s").chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=2,
        )
    assert httpx.get(f"{service.base_url}/v1/sessions/s", timeout=10).status_code == 404
    # --model rewrites the name an agent hard-codes
    renamed = make_service(embedded_server.base_url, model=SERVED_NAME)
    client(renamed.openai_base_url, "s").chat.completions.create(
        model="gpt-4o",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=2,
    )


def test_session_limits_refuse_calls_before_they_reach_the_server(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(
        embedded_server.base_url, limits=SessionLimits(max_calls=2, max_sessions=1)
    )
    run_agent(service.openai_base_url, "long", SERVED_NAME, "task", turns=2)
    with pytest.raises(openai.APIStatusError, match="max_calls_per_session") as too_long:
        one_call(service.openai_base_url, "long")
    assert too_long.value.status_code == 413
    with pytest.raises(openai.APIStatusError, match="max_sessions") as too_many:
        one_call(service.openai_base_url, "another")
    assert too_many.value.status_code == 503
    # discarding frees the slot; nothing is written for a discarded session
    resp = httpx.delete(f"{service.base_url}/v1/sessions/long", timeout=10)
    assert resp.json() == {"session": "long", "discarded": True, "model_calls": 2}
    one_call(service.openai_base_url, "another")
    assert read_pool(service.config.pool) == []


def test_episode_mode_refuses_calls_that_do_not_chain(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    one_call(service.openai_base_url, "two-choices", n=2)  # two replies to one prompt
    with pytest.raises(AgentServiceError, match=r"trajectory_mode 'episode'.*does not extend"):
        report_reward(service.base_url, "two-choices", 1.0, 1, trajectory_mode="episode")
    out = report_reward(service.base_url, "two-choices", 1.0, 1)  # auto: one per call
    assert (out["trajectory_mode"], out["trajectories"]) == ("per_call", 2)
