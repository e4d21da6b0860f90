"""The agent service with a token: pushes, reward reports and model calls without it
get 401; an unmodified agent passes it in its API key (``<token>:<session>``); the
calls it forwards carry the inference service's own token; a push cannot write
outside the pool; no bind beyond loopback without a token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import Generation, InferenceClient
from nexrl.core.util.auth import AGENT_SERVICE_TOKEN_ENV
from nexrl.rollout.agent_service import (
    AgentServiceError,
    ServiceConfig,
    push_trajectories,
    report_reward,
)
from nexrl.rollout.agent_service.cli import main
from nexrl.rollout.agent_service.server import AgentService, AgentServiceStartError
from tests.integration.agent_service._pool import read_pool
from tests.integration.agent_service.conftest import ServiceFactory
from tests.integration.inference._helpers import MESSAGES, SERVED_NAME

TOKEN = "agent-tok-81c2"
INFERENCE_TOKEN = "inf-tok-77d0"


@pytest.fixture(scope="module")
def upstream(tiny_model_dir: Path) -> Iterator[EmbeddedServer]:
    """An inference server that wants its own token."""
    server = EmbeddedServer(
        tiny_model_dir, served_model_name=SERVED_NAME, api_key=INFERENCE_TOKEN
    ).start()
    yield server
    server.stop()


def _record(gen: Generation, **override: Any) -> dict[str, Any]:
    rec = {
        "prompt_ids": gen.prompt_token_ids,
        "response_ids": gen.token_ids,
        "loss_mask": [1] * len(gen.token_ids),
        "logprobs": gen.logprobs,
        "reward": 1.0,
        "group_id": 3,
    }
    rec.update(override)
    return rec


def _sampled(upstream: EmbeddedServer) -> Generation:
    async def go() -> Generation:
        async with InferenceClient(
            upstream.base_url, SERVED_NAME, api_key=INFERENCE_TOKEN, timeout_s=120
        ) as client:
            (g,) = await client.chat(MESSAGES, max_tokens=4, seed=1)
            return g

    return asyncio.run(go())


def test_pushes_need_the_token(
    upstream: EmbeddedServer, make_service: ServiceFactory, tmp_path: Path
) -> None:
    service = make_service(upstream.base_url, token=TOKEN, upstream_api_key=INFERENCE_TOKEN)
    rec = _record(_sampled(upstream))
    for token in (None, "wrong", TOKEN + "x"):
        with pytest.raises(AgentServiceError) as info:
            push_trajectories(service.base_url, [rec], token=token)
        assert info.value.status_code == 401, token
        assert "bearer token" in str(info.value)
    assert read_pool(service.config.pool) == []
    assert httpx.get(f"{service.base_url}/health", timeout=10).status_code == 401

    # group ids are data, never paths: a path-like one lands in the pool, nowhere else
    before = sorted(p.name for p in tmp_path.iterdir())
    out = push_trajectories(
        service.base_url, [rec, _record(_sampled(upstream), group_id="../../x")], token=TOKEN
    )
    assert out["written"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before == ["pool.zarr"]
    assert not (tmp_path.parent / "x").exists()
    assert len(read_pool(service.config.pool)) == 2


def test_an_agent_sends_the_token_in_its_api_key(
    upstream: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(upstream.base_url, token=TOKEN, upstream_api_key=INFERENCE_TOKEN)

    def ask(api_key: str) -> str:
        client = openai.OpenAI(
            base_url=service.openai_base_url, api_key=api_key, timeout=60, max_retries=0
        )
        reply = client.chat.completions.create(
            model=SERVED_NAME, messages=[{"role": "user", "content": "1 2 3"}], max_tokens=3
        )
        return reply.choices[0].message.content or ""

    with pytest.raises(openai.AuthenticationError):
        ask("sess-1")  # a session id alone is no longer enough
    with pytest.raises(openai.AuthenticationError):
        ask("wrong:sess-1")
    assert isinstance(ask(f"{TOKEN}:sess-1"), str)  # forwarded with the inference token
    headers = {"Authorization": f"Bearer {TOKEN}"}
    summary = httpx.get(f"{service.base_url}/v1/sessions/sess-1", headers=headers, timeout=10)
    assert summary.status_code == 200 and summary.json()["calls"] == 1

    with pytest.raises(AgentServiceError) as info:
        report_reward(service.base_url, "sess-1", 1.0, group_id=5)
    assert info.value.status_code == 401
    done = report_reward(service.base_url, "sess-1", 1.0, group_id=5, token=TOKEN)
    assert done["trajectories"] == 1
    assert [t.group_id for t in read_pool(service.config.pool)] == [5]


def test_without_the_inference_token_calls_fail_upstream(
    upstream: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(upstream.base_url)  # no token either way: loopback only
    client = openai.OpenAI(
        base_url=service.openai_base_url, api_key="sess-9", timeout=60, max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):  # the inference server's 401, passed on
        client.chat.completions.create(
            model=SERVED_NAME, messages=[{"role": "user", "content": "1 2 3"}], max_tokens=3
        )


def test_no_bind_beyond_loopback_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ServiceConfig(upstream="http://127.0.0.1:9", pool=str(tmp_path / "pool"))
    with pytest.raises(AgentServiceStartError) as info:
        AgentService(config, host="0.0.0.0").start()
    assert "\n" not in str(info.value) and AGENT_SERVICE_TOKEN_ENV in str(info.value)

    monkeypatch.delenv(AGENT_SERVICE_TOKEN_ENV, raising=False)
    args = ["--pool", str(tmp_path / "pool"), "--upstream", "http://127.0.0.1:9"]
    assert main([*args, "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and AGENT_SERVICE_TOKEN_ENV in err[0] and "'0.0.0.0'" in err[0]
