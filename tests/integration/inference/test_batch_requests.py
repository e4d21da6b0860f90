"""Chat calls a rollout task makes at once travel in one HTTP request
(``InferenceClient(batch_calls=True)`` and the embedded server's
``POST /v1/chat/completions/batch``): a real server process on 127.0.0.1 and the
real ``openai`` client. Each call still gets what it would get alone: the same
seeded tokens, log-probs and policy version, and its own error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient, InferenceError
from tests.integration.inference._helpers import SERVED_NAME

GROUPS = 8


def _health(server: EmbeddedServer) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.base_url}/health", timeout=10).json()
    return body


async def _group(client: InferenceClient, g: int, **params: Any) -> list[Any]:
    """One prompt group's request: n=4 seeded choices, 6 tokens each."""
    return await client.chat(
        [{"role": "user", "content": f"What is the largest of {g} 7 5?"}],
        n=4,
        max_tokens=6,
        temperature=1.0,
        extra_body={"seeds": [100 * g + j for j in range(4)]},
        **params,
    )


async def _groups(client: InferenceClient, *extra: Any) -> list[Any]:
    async with client:
        return await asyncio.gather(
            *(_group(client, g) for g in range(GROUPS)), *extra, return_exceptions=True
        )


def test_a_tasks_calls_go_in_one_request_and_get_what_they_get_alone(
    server: EmbeddedServer,
) -> None:
    before = _health(server)
    alone = asyncio.run(_groups(InferenceClient(server.base_url, SERVED_NAME)))
    middle = _health(server)
    batched = asyncio.run(_groups(InferenceClient(server.base_url, SERVED_NAME, batch_calls=True)))
    after = _health(server)

    assert middle["chat_batches"] == before["chat_batches"]  # one request per call
    assert after["chat_batches"] == middle["chat_batches"] + 1  # all eight in one
    assert after["requests_served"] - middle["requests_served"] == GROUPS
    assert all(isinstance(r, list) and len(r) == 4 for r in alone + batched), batched
    for one, many in zip(alone, batched, strict=True):
        assert [g.token_ids for g in one] == [g.token_ids for g in many]
        assert [g.prompt_token_ids for g in one] == [g.prompt_token_ids for g in many]
        for a, b in zip(one, many, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            assert b.policy_version == after["policy_version"]


def test_a_bad_call_in_a_batch_fails_alone_with_the_error_it_gets_alone(
    server: EmbeddedServer,
) -> None:
    def bad(client: InferenceClient) -> Any:
        return _group(client, 0, top_p=0.0)  # out of range: a 400 naming top_p

    async def run(batch: bool) -> list[Any]:
        client = InferenceClient(server.base_url, SERVED_NAME, batch_calls=batch)
        return await _groups(client, bad(client))

    alone, batched = asyncio.run(run(False)), asyncio.run(run(True))
    assert all(isinstance(r, list) for r in batched[:GROUPS]), batched
    err = batched[GROUPS]
    assert isinstance(err, InferenceError) and err.status_code == 400
    assert "top_p" in str(err)
    assert str(err) == str(alone[GROUPS])


def test_an_engine_without_the_batch_route_gets_each_call_alone(
    start_embedded_server: Any, snapshots: dict[str, Path]
) -> None:
    """The vLLM stand-in has no batch route (vLLM has none): the client falls back
    to one request per call after the first 404, and every call is answered."""
    vllm = start_embedded_server(snapshots["a"], "--api", "vllm")

    async def run(batch: bool) -> tuple[list[Any], list[Any]]:
        client = InferenceClient(vllm.base_url, SERVED_NAME, batch_calls=batch)
        async with client:
            first = await asyncio.gather(*(_group(client, g) for g in range(GROUPS)))
            second = await asyncio.gather(*(_group(client, g) for g in range(GROUPS)))
        return list(first), list(second)

    (first, second), (plain, _) = asyncio.run(run(True)), asyncio.run(run(False))
    tokens = [[g.token_ids for g in r] for r in first]
    assert len(tokens) == GROUPS and all(len(r) == 4 for r in tokens)
    assert tokens == [[g.token_ids for g in r] for r in second]  # (after the fallback)
    assert tokens == [[g.token_ids for g in r] for r in plain]
