"""A real embedded server process on 127.0.0.1, called with the real ``openai`` client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from tests.integration.inference._helpers import MESSAGES, SERVED_NAME

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "max_digit",
            "description": "largest digit",
            "parameters": {"type": "object", "properties": {"digits": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def client(server: EmbeddedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key="x", timeout=60, max_retries=0)


def _local_greedy(model_dir: Path, prompt_ids: list[int], n: int) -> list[int]:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = model.generate(
        torch.tensor([prompt_ids]),
        max_new_tokens=n,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    return list(out[0, len(prompt_ids) :].tolist())


def test_greedy_chat_is_token_in_token_out(
    client: openai.OpenAI, snapshots: dict[str, Path]
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=SERVED_NAME,
        messages=cast(Any, MESSAGES),
        max_tokens=10,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        extra_body={"return_token_ids": True},
    )
    resp = raw.parse()
    extra = resp.model_extra or {}
    choice = resp.choices[0]
    token_ids = (choice.model_extra or {})["token_ids"]
    tok = AutoTokenizer.from_pretrained(snapshots["a"])
    expected_prompt = tok.apply_chat_template(
        MESSAGES, add_generation_prompt=True, return_dict=False
    )
    assert extra["prompt_token_ids"] == list(expected_prompt)
    assert token_ids == _local_greedy(snapshots["a"], extra["prompt_token_ids"], len(token_ids))
    assert extra["policy_version"] == 0 and raw.headers["x-policy-version"] == "0"
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert len(choice.logprobs.content) == len(token_ids)
    assert all(len(c.top_logprobs) == 2 for c in choice.logprobs.content)
    assert resp.usage is not None and resp.usage.completion_tokens == len(token_ids)
    assert choice.message.content == tok.decode(token_ids, skip_special_tokens=True)


def test_completions_with_token_prompt_seed_and_n(client: openai.OpenAI) -> None:
    def ask() -> Any:
        return client.completions.create(
            model=SERVED_NAME,
            prompt=[5, 6, 7, 8],
            max_tokens=6,
            n=3,
            seed=42,
            temperature=1.0,
            logprobs=1,
            extra_body={"ignore_eos": True},
        )

    first, second = ask(), ask()
    ids = [(c.model_extra or {})["token_ids"] for c in first.choices]
    assert ids == [(c.model_extra or {})["token_ids"] for c in second.choices]  # seeded
    assert len({tuple(x) for x in ids}) > 1  # the n choices differ
    for c in first.choices:
        assert (c.model_extra or {})["prompt_token_ids"] == [5, 6, 7, 8]
        assert c.logprobs is not None and len(c.logprobs.token_logprobs or []) == 6
        assert c.finish_reason == "length"


def test_tools_are_rendered_and_the_reply_is_a_valid_message(
    client: openai.OpenAI, snapshots: dict[str, Path]
) -> None:
    tok = AutoTokenizer.from_pretrained(snapshots["a"])
    with_tools = client.chat.completions.create(
        model=SERVED_NAME,
        messages=cast(Any, MESSAGES),
        tools=cast(Any, TOOLS),
        max_tokens=4,
        temperature=0,
    )
    prompt = tok.decode((with_tools.model_extra or {})["prompt_token_ids"])
    assert "<tools>" in prompt and '"name": "max_digit"' in prompt
    msg = with_tools.choices[0].message
    assert msg.role == "assistant" and msg.tool_calls is None  # a random model calls nothing
    none = client.chat.completions.create(
        model=SERVED_NAME,
        messages=cast(Any, MESSAGES),
        tools=cast(Any, TOOLS),
        tool_choice="none",
        max_tokens=1,
    )
    assert "<tools>" not in tok.decode((none.model_extra or {})["prompt_token_ids"])


def test_a_prompt_sent_again_gets_the_templates_ids_each_time(
    client: openai.OpenAI, snapshots: dict[str, Path]
) -> None:
    """The server renders a chat prompt once and reuses its ids (PromptCache): a
    prompt sent again, alone or with tools, without the generation prompt, or with
    other content, must still get exactly what the chat template renders for it."""
    tok = AutoTokenizer.from_pretrained(snapshots["a"])
    other = [{"role": "user", "content": "What is the largest of 1 2 4?"}]

    def ask(messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
        resp = client.chat.completions.create(
            model=SERVED_NAME, messages=cast(Any, messages), max_tokens=1, **kwargs
        )
        return list((resp.model_extra or {})["prompt_token_ids"])

    def rendered(messages: list[dict[str, str]], **kwargs: Any) -> list[int]:
        kwargs.setdefault("add_generation_prompt", True)
        return list(tok.apply_chat_template(messages, return_dict=False, **kwargs))

    plain = rendered(MESSAGES)
    no_gen = rendered(MESSAGES, add_generation_prompt=False)
    with_tools = rendered(MESSAGES, tools=TOOLS)
    assert len({tuple(plain), tuple(no_gen), tuple(with_tools), tuple(rendered(other))}) == 4
    for _ in range(2):  # the second round is answered from the cache
        assert ask(MESSAGES) == plain
        assert ask(MESSAGES, extra_body={"add_generation_prompt": False}) == no_gen
        assert ask(MESSAGES, tools=cast(Any, TOOLS)) == with_tools
        assert ask(other) == rendered(other)
        assert ask(MESSAGES, tools=cast(Any, TOOLS), tool_choice="none") == plain


@pytest.mark.parametrize(
    ("payload", "status", "param"),
    [
        ({"model": SERVED_NAME, "messages": MESSAGES, "temperature": 5}, 400, "temperature"),
        ({"model": SERVED_NAME, "messages": "hi"}, 400, "messages"),
        ({"model": SERVED_NAME}, 400, "messages"),
        ({"model": "gpt-4", "messages": MESSAGES}, 404, "model"),
        ({"model": SERVED_NAME, "messages": MESSAGES, "max_tokens": 100000}, 400, "max_tokens"),
        ({"model": SERVED_NAME, "messages": MESSAGES, "stream": True}, 400, None),
        ({"model": SERVED_NAME, "messages": MESSAGES, "n": 1000}, 400, "n"),
    ],
)
def test_invalid_chat_requests_get_openai_errors(
    server: EmbeddedServer, payload: dict[str, Any], status: int, param: str | None
) -> None:
    resp = httpx.post(f"{server.openai_base_url}/chat/completions", json=payload, timeout=30)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param


def test_other_invalid_requests(server: EmbeddedServer, client: openai.OpenAI) -> None:
    bad_json = httpx.post(
        f"{server.openai_base_url}/completions",
        content=b'{"model": ',
        headers={"content-type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    oov = httpx.post(
        f"{server.openai_base_url}/completions", json={"model": SERVED_NAME, "prompt": [10**6]}
    )
    assert oov.status_code == 400 and oov.json()["error"]["param"] == "prompt"
    missing = httpx.get(f"{server.base_url}/v2/nothing")
    assert missing.status_code == 404 and "error" in missing.json()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=SERVED_NAME, messages=[], max_tokens=1)
    assert info.value.status_code == 400


def test_models_and_health(server: EmbeddedServer, client: openai.OpenAI) -> None:
    (card,) = client.models.list().data
    assert card.id == SERVED_NAME
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["status"] == "ok" and health["policy_version"] == 0


def test_concurrent_requests_are_batched_together(server: EmbeddedServer) -> None:
    before = httpx.get(f"{server.base_url}/health").json()

    async def burst() -> list[Any]:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c:
            return await asyncio.gather(
                *(
                    c.complete([3 + i, 4, 5], max_tokens=8, temperature=0, ignore_eos=True)
                    for i in range(6)
                )
            )

    results = asyncio.run(burst())
    after = httpx.get(f"{server.base_url}/health").json()
    assert all(len(g.token_ids) == 8 and g.policy_version == 0 for (g,) in results)
    assert [g.prompt_token_ids for (g,) in results] == [[3 + i, 4, 5] for i in range(6)]
    assert after["requests_served"] - before["requests_served"] == 6
    assert after["batches_run"] - before["batches_run"] < 6  # several requests per batch


def test_a_request_sent_mid_batch_joins_it_and_returns_first(
    server: EmbeddedServer, snapshots: dict[str, Path]
) -> None:
    """Continuous batching: a short request sent while a long one generates joins
    the running batch (no second batch; the server counts it as joined) and is
    answered before the long one ends; both answers equal what each gets alone."""
    long_prompt, short_prompt = [3, 4, 5], [6, 7, 8, 9, 10]

    async def scenario() -> tuple[list[str], Any, Any, dict[str, Any], dict[str, Any]]:
        order: list[str] = []
        async with (
            InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c,
            httpx.AsyncClient() as h,
        ):
            before = (await h.get(f"{server.base_url}/health")).json()

            async def ask(name: str, prompt: list[int], n: int) -> Any:
                (g,) = await c.complete(prompt, max_tokens=n, temperature=0, ignore_eos=True)
                order.append(name)
                return g

            long_task = asyncio.create_task(ask("long", long_prompt, 400))
            while (await h.get(f"{server.base_url}/health")).json()["batches_run"] == before[
                "batches_run"
            ]:
                await asyncio.sleep(0.005)  # until the long request's batch has started
            short = await ask("short", short_prompt, 4)
            long_ = await long_task
            after = (await h.get(f"{server.base_url}/health")).json()
        return order, long_, short, before, after

    order, long_, short, before, after = asyncio.run(scenario())
    assert order == ["short", "long"]
    assert after["batches_run"] - before["batches_run"] == 1
    assert after["requests_joined"] - before["requests_joined"] == 1
    model_dir = snapshots["a"]
    assert short.token_ids == _local_greedy(model_dir, short_prompt, 4)
    assert long_.token_ids[:40] == _local_greedy(model_dir, long_prompt, 40)
    assert len(long_.token_ids) == 400
