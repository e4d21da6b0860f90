"""Tool-call parsing and request validation of the embedded server (pure functions)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from backends.inference.embedded.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    UpdateWeightsRequest,
)
from backends.inference.embedded.tools import parse_tool_calls


def test_text_without_calls_is_unchanged() -> None:
    assert parse_tool_calls("just 7") == ("just 7", [])


def test_calls_are_parsed_and_removed_from_content() -> None:
    text = (
        'Let me check. <tool_call>{"name": "max_digit", "arguments": {"digits": "375"}}'
        '</tool_call>\n<tool_call>{"name": "echo", "arguments": "{\\"x\\": 1}"}</tool_call>'
    )
    content, calls = parse_tool_calls(text)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["max_digit", "echo"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"digits": "375"}
    assert calls[1]["function"]["arguments"] == '{"x": 1}'
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert calls[0]["id"] != calls[1]["id"]


def test_unclosed_final_call_and_bad_json() -> None:
    content, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}')
    assert content is None and calls[0]["function"] == {"name": "f", "arguments": "{}"}
    bad = "<tool_call>{not json}</tool_call>"
    assert parse_tool_calls(bad) == (bad, [])
    no_name = '<tool_call>{"arguments": {}}</tool_call>'
    assert parse_tool_calls(no_name) == (no_name, [])


def _chat(**kw: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stream": True}, "stream"),
        ({"top_logprobs": 3}, "requires logprobs"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function"}]}, "tools\\[0\\]"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"messages": []}, "at least 1"),
        ({"stop": ["", "x"]}, "stop"),
        ({"frequency_penalty": 0.5}, "not supported"),
        ({"n": 3, "seeds": [1, 2]}, "one seed per choice \\(n=3\\), got 2"),
    ],
)
def test_invalid_chat_requests(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _chat(**fields)


def test_valid_chat_request_defaults() -> None:
    req = _chat(max_completion_tokens=5, stop="x", unknown_field=1)
    assert req.requested_max_tokens() == 5 and req.stop_list() == ("x",)
    assert req.temperature == 1.0 and req.n == 1 and req.return_token_ids


@pytest.mark.parametrize(
    "prompt", ["hi", ["a", "b"], [1, 2, 3], [[1, 2], [3]]], ids=["str", "strs", "ids", "idss"]
)
def test_completion_prompt_forms(prompt: object) -> None:
    req = CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    assert req.max_tokens == 16 and req.prompt == prompt


@pytest.mark.parametrize("prompt", ["", [], [[]], [[1], []]])
def test_empty_prompts_are_invalid(prompt: object) -> None:
    with pytest.raises(ValidationError, match="empty"):
        CompletionRequest.model_validate({"model": "m", "prompt": prompt})


def test_update_weights_versions() -> None:
    assert UpdateWeightsRequest(model_path="/s", version=3).target_version(1) == 3
    assert UpdateWeightsRequest(model_path="/s", weight_version="4").target_version(1) == 4
    assert UpdateWeightsRequest(model_path="/s").target_version(1) == 2
    with pytest.raises(OpenAIError, match="integer"):
        UpdateWeightsRequest(model_path="/s", weight_version="v1").target_version(1)


def test_openai_error_body() -> None:
    err = OpenAIError(404, "nope", type="not_found_error", param="model", code="model_not_found")
    assert err.body() == {
        "error": {
            "message": "nope",
            "type": "not_found_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
