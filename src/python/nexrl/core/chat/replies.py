"""Token-level replies of the OpenAI API: ``/v1/chat/completions`` and ``/v1/completions``
JSON bodies -> ``Generation`` (token ids, log-probs, policy version) per choice, and
``InferenceError``, what every inference failure becomes.

Parsing works on plain JSON dicts, so it serves any of the three engines (the
embedded server, vLLM, SGLang); a malformed reply (not JSON, no choices, missing
or inconsistent token ids/log-probs) is an ``InferenceError`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nexrl.core.errors import NexrlError

__all__ = [
    "Generation",
    "InferenceError",
    "malformed",
    "parse_chat_completion",
    "parse_completion",
]


class InferenceError(RuntimeError, NexrlError):
    """Inference failed: unreachable, timed out, refused the request, or replied badly."""

    def __init__(
        self, message: str, *, base_url: str | None = None, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.base_url = base_url
        self.status_code = status_code


@dataclass(frozen=True)
class Generation:
    """One choice of a reply, token in / token out.

    ``logprobs`` has one entry per ``token_ids`` entry, or is ``None`` when
    log-probs were not requested; ``policy_version`` is ``None`` when the
    server does not report one (vLLM, SGLang: the caller knows it).
    ``policy_version_last`` is the newest version that may have produced a token
    (a request that straddled a weight update, a partial rollout, has
    ``policy_version < policy_version_last``); ``None``: the same as ``policy_version``.
    """

    index: int
    text: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    policy_version: int | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    policy_version_last: int | None = None


def malformed(what: str) -> InferenceError:
    """The error of a reply that is not what the API promises (``what``: how)."""
    return InferenceError(f"malformed inference reply: {what}")


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or any(
        isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in value
    ):
        raise malformed(f"{what} must be a list of non-negative ints")
    return list(value)


def _version(body: Mapping[str, Any], header: str | None) -> int | None:
    raw = body.get("policy_version", header)
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise malformed(f"policy_version {raw!r} is not an int") from None


def _float_list(values: Any, what: str, n: int) -> list[float]:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise malformed(f"{what} must be numbers") from None
    if len(out) != n:
        raise malformed(f"{what} has {len(out)} entries for {n} tokens")
    return out


def _parse(
    body: Any, header_version: str | None, require_token_ids: bool, chat: bool
) -> list[Generation]:
    if not isinstance(body, dict):
        raise malformed(f"expected a JSON object, got {type(body).__name__}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed("no choices")
    version = _version(body, header_version)
    out = []
    for i, ch in enumerate(choices):
        if not isinstance(ch, dict):
            raise malformed(f"choices[{i}] is not an object")
        where = f"choices[{i}]"
        prompt_ids = ch.get("prompt_token_ids", body.get("prompt_token_ids"))
        token_ids = ch.get("token_ids")
        if require_token_ids and (prompt_ids is None or token_ids is None):
            raise malformed(
                f"{where} has no prompt_token_ids/token_ids (the server must support "
                "return_token_ids: the embedded server, vLLM >= 0.10.2, recent SGLang)"
            )
        prompt_ids = _int_list(prompt_ids or [], f"{where}.prompt_token_ids")
        token_ids = _int_list(token_ids or [], f"{where}.token_ids")
        lp = ch.get("logprobs")
        logprobs = None
        if isinstance(lp, dict):
            if chat:
                entries = lp.get("content") or []
                values = [e.get("logprob") if isinstance(e, dict) else None for e in entries]
            else:
                values = lp.get("token_logprobs") or []
            logprobs = _float_list(values, f"{where}.logprobs", len(token_ids))
        if chat:
            msg = ch.get("message")
            if not isinstance(msg, dict):
                raise malformed(f"{where}.message is missing")
            text, calls = msg.get("content"), msg.get("tool_calls") or []
        else:
            text, calls = ch.get("text"), []
        if text is not None and not isinstance(text, str):
            raise malformed(f"{where} text is not a string")
        out.append(
            Generation(
                index=int(ch.get("index", i)),
                text=text,
                prompt_token_ids=prompt_ids,
                token_ids=token_ids,
                logprobs=logprobs,
                finish_reason=str(ch.get("finish_reason") or ""),
                policy_version=version,
                tool_calls=list(calls),
            )
        )
    return out


def parse_chat_completion(
    body: Any, *, header_version: str | None = None, require_token_ids: bool = True
) -> list[Generation]:
    """Parse a ``/v1/chat/completions`` JSON body; raise ``InferenceError`` if malformed."""
    return _parse(body, header_version, require_token_ids, chat=True)


def parse_completion(
    body: Any, *, header_version: str | None = None, require_token_ids: bool = True
) -> list[Generation]:
    """Parse a ``/v1/completions`` JSON body; raise ``InferenceError`` if malformed."""
    return _parse(body, header_version, require_token_ids, chat=False)
