"""What the proxy changes in a request and a reply, and what it records.

The request goes upstream with ``return_token_ids`` and log-probs switched on
(as ``InferenceClient`` asks for them); the reply is parsed into
``Generation``s (the token ids and log-probs the service sampled, its policy
version, the finish reason) and handed back to the agent with only what the
agent asked for: the log-probs and token ids it did not request are removed,
so an agent sees a plain OpenAI response.

Streaming (``stream: true``) is refused with a 400: the token ids and
log-probs of a streamed reply are not recorded by this proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexrl.core.chat import Generation, InferenceError, parse_chat_completion, parse_completion
from nexrl.rollout.agent_service.errors import ServiceError

__all__ = ["Asked", "parse_reply", "prepare_request", "restore_reply"]

POLICY_VERSION_HEADER = "x-policy-version"


@dataclass(frozen=True)
class Asked:
    """What the agent itself asked for (so the reply gives back just that)."""

    chat: bool
    logprobs: Any
    token_ids: bool


def prepare_request(body: Any, *, chat: bool, model: str | None) -> tuple[dict[str, Any], Asked]:
    """The body to send upstream and what the agent asked for."""
    if not isinstance(body, dict):
        raise ServiceError(400, "request body must be a JSON object", code="invalid_json")
    if body.get("stream"):
        raise ServiceError(
            400,
            "stream: streaming is not supported by the NexRL agent service (it records "
            "the token ids of whole replies); call with stream=false",
            param="stream",
            code="stream_unsupported",
        )
    asked = Asked(chat, body.get("logprobs"), bool(body.get("return_token_ids")))
    out = {k: v for k, v in body.items() if k != "stream"}
    if model is not None:
        out["model"] = model
    out["return_token_ids"] = True
    if chat:
        out["logprobs"] = True
    elif out.get("logprobs") is None:
        out["logprobs"] = 0  # the sampled token's log-prob only
    return out, asked


def parse_reply(body: Any, headers: Any, *, chat: bool) -> list[Generation]:
    """The generations of an upstream reply; a reply without token ids or log-probs is an
    error (the call could not be trained on)."""
    parse = parse_chat_completion if chat else parse_completion
    try:
        gens = parse(body, header_version=headers.get(POLICY_VERSION_HEADER))
    except InferenceError as exc:
        raise ServiceError(
            502, f"inference service reply: {exc}", code="bad_upstream_reply"
        ) from None
    for g in gens:
        if g.logprobs is None:
            raise ServiceError(
                502,
                f"inference service reply: choices[{g.index}] has no log-probs although "
                "they were requested",
                code="bad_upstream_reply",
            )
        if not g.token_ids:
            raise ServiceError(
                502,
                f"inference service reply: choices[{g.index}] has no sampled tokens",
                code="bad_upstream_reply",
            )
    return gens


def restore_reply(body: dict[str, Any], asked: Asked) -> dict[str, Any]:
    """The reply as the agent would get it without the proxy's additions."""
    out = dict(body)
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
    choices = []
    for ch in out.get("choices") or []:
        ch = dict(ch)
        if not asked.token_ids:
            ch.pop("token_ids", None)
            ch.pop("prompt_token_ids", None)
        if asked.logprobs is None or asked.logprobs is False:
            ch["logprobs"] = None
        choices.append(ch)
    out["choices"] = choices
    return out


def tool_messages(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The ``role: tool`` messages of a chat request (the agent's results of the tool
    calls it made), as ``{"tool_call_id", "content"}``, for the episode's trace."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ()
    return tuple(
        {"tool_call_id": str(m.get("tool_call_id", "")), "content": str(m.get("content", ""))}
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    )
