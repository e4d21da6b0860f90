"""Tool calls end to end: a model with known weights emits a Hermes tool call,
the server returns it as OpenAI ``tool_calls``, both clients read it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import openai
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from tests.integration.inference._helpers import MESSAGES, SERVED_NAME

CALL = '<tool_call>{"name": "f"}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def bigram_reply() -> str:
    return CALL


def test_openai_client_receives_tool_calls(bigram_server: EmbeddedServer) -> None:
    client = openai.OpenAI(base_url=bigram_server.openai_base_url, api_key="x", max_retries=0)
    resp = client.chat.completions.create(
        model=SERVED_NAME,
        messages=cast(Any, MESSAGES),
        tools=cast(Any, TOOLS),
        temperature=0,
        max_tokens=20,
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, call.function.arguments) == ("f", "{}")
    # token out: the call's tokens and the closing <|im_end|> are in token_ids
    assert len((choice.model_extra or {})["token_ids"]) == 10


def test_without_tools_the_call_stays_text(bigram_server: EmbeddedServer) -> None:
    async def ask() -> Any:
        async with InferenceClient(bigram_server.base_url, SERVED_NAME, timeout_s=60) as c:
            with_tools = await c.chat(MESSAGES, tools=TOOLS, temperature=0, max_tokens=20)
            plain = await c.chat(MESSAGES, temperature=0, max_tokens=20)
            return with_tools[0], plain[0]

    with_tools, plain = asyncio.run(ask())
    assert with_tools.tool_calls[0]["function"] == {"name": "f", "arguments": "{}"}
    assert with_tools.logprobs is not None and min(with_tools.logprobs) > -1e-3  # known weights
    assert plain.tool_calls == [] and plain.text == CALL
    assert plain.finish_reason == "stop"
