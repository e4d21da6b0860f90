"""Client side: parsing token-level replies, and turning every failure into
``InferenceError`` fast (dead, hung, refusing or malformed servers).

The servers are ``StandinEngine`` instances: real local HTTP servers that
answer with canned replies (good ones shaped like the embedded server's/vLLM's).
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from nexrl.core.chat import (
    InferenceClient,
    InferenceError,
    make_async_client,
    make_client,
    parse_chat_completion,
    parse_completion,
)
from tests.unit.inference._standin import StandinEngine

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "prompt_token_ids": [1, 2, 3],
    "policy_version": 4,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "7"},
            "finish_reason": "stop",
            "token_ids": [9, 1],
            "logprobs": {
                "content": [
                    {"token": "7", "logprob": -0.5, "bytes": [55], "top_logprobs": []},
                    {"token": "", "logprob": -0.1, "bytes": [], "top_logprobs": []},
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}

COMPLETION = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "text": "ab",
            "finish_reason": "length",
            "prompt_token_ids": [5],
            "token_ids": [6, 7],
            "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0]},
        }
    ],
}


def test_parse_chat_reply() -> None:
    (g,) = parse_chat_completion(CHAT)
    assert g.prompt_token_ids == [1, 2, 3]
    assert g.token_ids == [9, 1]
    assert g.logprobs == [-0.5, -0.1]
    assert (g.text, g.finish_reason, g.policy_version) == ("7", "stop", 4)


def test_parse_completion_reply_and_header_version() -> None:
    (g,) = parse_completion(COMPLETION, header_version="11")
    assert (g.prompt_token_ids, g.token_ids, g.logprobs) == ([5], [6, 7], [-1.0, -2.0])
    assert g.policy_version == 11


def test_version_is_none_when_the_engine_reports_none() -> None:
    body = copy.deepcopy(CHAT)
    del body["policy_version"]
    assert parse_chat_completion(body)[0].policy_version is None


def _broken(edit: Any) -> dict[str, Any]:
    body = copy.deepcopy(CHAT)
    edit(body)
    return body


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "expected a JSON object"),
        (_broken(lambda b: b.update(choices=[])), "no choices"),
        (_broken(lambda b: b["choices"][0].pop("token_ids")), "return_token_ids"),
        (_broken(lambda b: b.pop("prompt_token_ids")), "return_token_ids"),
        (_broken(lambda b: b["choices"][0].update(token_ids=[1, "x"])), "list of non-negative"),
        (_broken(lambda b: b["choices"][0]["logprobs"]["content"].pop()), "1 entries for 2"),
        (_broken(lambda b: b.update(policy_version="v2")), "policy_version"),
        (_broken(lambda b: b["choices"][0].pop("message")), "message is missing"),
    ],
)
def test_malformed_replies_are_clear_errors(body: Any, match: str) -> None:
    with pytest.raises(InferenceError, match=match):
        parse_chat_completion(body)


def test_token_ids_optional_when_not_required() -> None:
    body = _broken(lambda b: (b["choices"][0].pop("token_ids"), b.pop("prompt_token_ids")))
    body["choices"][0]["logprobs"] = None
    (g,) = parse_chat_completion(body, require_token_ids=False)
    assert g.token_ids == [] and g.logprobs is None


def test_client_limits_are_bounded() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        make_client("http://127.0.0.1:1", max_retries=100)
    with pytest.raises(ValueError, match="timeout_s"):
        make_async_client("http://127.0.0.1:1", timeout_s=0)
    c = make_client("http://127.0.0.1:1/v1/", timeout_s=3, max_retries=1)
    assert (str(c.base_url), c.max_retries, c.timeout) == ("http://127.0.0.1:1/v1/", 1, 3)


def _chat(client: InferenceClient) -> list[Any]:
    return asyncio.run(client.chat([{"role": "user", "content": "hi"}], max_tokens=2))


def test_client_round_robins_and_asks_for_token_ids() -> None:
    routes = {("POST", "/v1/chat/completions"): (200, CHAT)}
    with StandinEngine(dict(routes)) as a, StandinEngine(dict(routes)) as b:
        client = InferenceClient([a.url, b.url], "m", timeout_s=5, max_retries=0)
        for _ in range(4):
            (g,) = _chat(client)
            assert g.token_ids == [9, 1]
        assert len(a.requests) == len(b.requests) == 2
        sent = a.requests[0].body
        assert sent["return_token_ids"] is True and sent["logprobs"] is True
        assert sent["model"] == "m" and sent["max_tokens"] == 2


def test_malformed_reply_from_server() -> None:
    with StandinEngine({("POST", "/v1/chat/completions"): (200, b"<html>oops")}) as s:
        client = InferenceClient(s.url, "m", timeout_s=5, max_retries=0)
        with pytest.raises(InferenceError, match="malformed inference reply"):
            _chat(client)
    with StandinEngine({("POST", "/v1/chat/completions"): (200, {"choices": []})}) as s:
        client = InferenceClient(s.url, "m", timeout_s=5, max_retries=0)
        with pytest.raises(InferenceError, match="no choices") as info:
            _chat(client)
        assert info.value.base_url == s.url


def test_http_error_keeps_status_and_message() -> None:
    err = {"error": {"message": "model `x` not found", "type": "not_found_error", "param": "model"}}
    with StandinEngine({("POST", "/v1/chat/completions"): (404, err)}) as s:
        client = InferenceClient(s.url, "m", timeout_s=5, max_retries=2)
        with pytest.raises(InferenceError, match="answered 404: model `x` not found") as info:
            _chat(client)
        assert info.value.status_code == 404
        assert len(s.requests) == 1  # 4xx is not retried


def test_dead_server_fails_fast() -> None:
    client = InferenceClient("http://127.0.0.1:9", "m", timeout_s=20, max_retries=1)
    start = time.monotonic()
    with pytest.raises(InferenceError, match="cannot reach"):
        _chat(client)
    assert time.monotonic() - start < 10


def test_hung_server_fails_within_the_timeout_including_retries() -> None:
    with StandinEngine({("POST", "/v1/chat/completions"): (200, CHAT)}, hang_s=30) as s:
        client = InferenceClient(s.url, "m", timeout_s=1.5, max_retries=3)
        start = time.monotonic()
        with pytest.raises(InferenceError, match=r"1\.5s"):
            _chat(client)
        assert time.monotonic() - start < 3.0


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter (nothing imported yet) on this one's path."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )


def test_importing_nexrl_inference_does_not_import_backends() -> None:
    proc = fresh_python(
        "import sys, nexrl, nexrl.inference, nexrl.driver.modeling;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'backends'];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_client_module_imports_openai_only_when_a_client_is_made() -> None:
    """A driver checking a recipe of a built-in worker imports the rollout worker
    classes and this module, never a client: openai (~1-2 s of CPU at every start)
    waits for the first client."""
    proc = fresh_python(
        "import sys;"
        "import nexrl.rollout.worker.registry, nexrl.rollout.worker.base, nexrl.core.chat.client as c;"
        "before = 'openai' in sys.modules;"
        "client = c.make_async_client('http://127.0.0.1:9');"
        "print(before, type(client).__name__); sys.exit(1 if before else 0)"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["False", "AsyncOpenAI"]
