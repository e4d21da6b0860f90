"""Agent functions written only against the ``openai`` client (loaded by path, like a
recipe's ``agent_entrypoint``). ``two_calls*`` keep the raw replies they got, as the
agent saw them, in ``SEEN[api_key]``. Keep this module free of nexrl imports."""

from __future__ import annotations

import asyncio
from typing import Any

import openai

SEEN: dict[str, list[dict[str, Any]]] = {}
EXTRA = {"return_token_ids": True}  # the agent may ask for token ids itself


def _messages(task: dict[str, Any], first: str | None) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]
    if first is not None:
        messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "max"}]
    return messages


def two_calls(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    first = client.chat.completions.create(
        model="whatever-the-agent-says",
        messages=_messages(task, None),
        max_tokens=4,
        logprobs=True,
        extra_body=EXTRA,
    )
    text = first.choices[0].message.content or ""
    final = client.chat.completions.create(
        model=model,
        messages=_messages(task, text),
        max_tokens=4,
        logprobs=True,
        extra_body=EXTRA,
    )
    SEEN[api_key] = [first.model_dump(), final.model_dump()]
    return final.choices[0].message.content or ""


async def two_calls_async(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    first = await client.chat.completions.create(
        model=model,
        messages=_messages(task, None),
        max_tokens=4,
        logprobs=True,
        extra_body=EXTRA,
    )
    final = await client.chat.completions.create(
        model=model,
        messages=_messages(task, first.choices[0].message.content or ""),
        max_tokens=4,
        logprobs=True,
        extra_body=EXTRA,
    )
    await client.close()
    SEEN[api_key] = [first.model_dump(), final.model_dump()]
    return final.choices[0].message.content or ""


def raises(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model=model, messages=_messages(task, None), max_tokens=2)
    raise ValueError("the agent's own bug")


def no_calls(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    return "9"


def returns_a_number(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> Any:
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model=model, messages=_messages(task, None), max_tokens=2)
    return 9


async def never_returns(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    await asyncio.Event().wait()
    return ""
