"""OpenAI chat/completions requests -> batch rows, and outputs -> OpenAI responses.

Token in, token out like vLLM: chat responses carry ``prompt_token_ids`` at
the top level and ``token_ids`` per choice; completion choices carry both.
Every response also says which ``policy_version`` produced it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from backends.inference.embedded.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    invalid,
)
from backends.inference.embedded.sampling import SamplingParams, SequenceOutput
from backends.inference.embedded.service import InferenceService, Row, new_seed
from backends.inference.embedded.tools import parse_tool_calls


def _check_model(service_name: str, requested: str) -> None:
    if requested != service_name:
        raise OpenAIError(
            404,
            f"The model `{requested}` does not exist; this server serves `{service_name}`.",
            param="model",
            code="model_not_found",
            type="not_found_error",
        )


def _choice_seeds(req: ChatCompletionRequest | CompletionRequest, count: int) -> list[int]:
    """Per-choice seeds: from ``seeds`` (each as a request of its own with that seed)
    or derived from ``seed``."""
    if req.seeds is not None:
        return [_seeds(s, 1)[0] for s in req.seeds]
    return _seeds(req.seed, count)


def _seeds(seed: int | None, count: int) -> list[int]:
    if seed is None:
        return [new_seed() for _ in range(count)]
    # Distinct, reproducible streams per choice of a seeded request.
    return [(seed * 0x9E3779B97F4A7C15 + i) & 0x7FFF_FFFF_FFFF_FFFF for i in range(count)]


def _params(
    req: ChatCompletionRequest | CompletionRequest,
    prompt_len: int,
    max_tokens: int | None,
    max_model_len: int,
    seed: int,
    top_logprobs: int,
) -> SamplingParams:
    room = max_model_len - prompt_len
    if room < 1:
        raise invalid(
            f"This model's maximum context length is {max_model_len} tokens; "
            f"the prompt has {prompt_len}.",
            "messages" if isinstance(req, ChatCompletionRequest) else "prompt",
            "context_length_exceeded",
        )
    if max_tokens is None:
        max_tokens = room
    elif max_tokens > room:
        raise invalid(
            f"This model's maximum context length is {max_model_len} tokens; you requested "
            f"{prompt_len + max_tokens} ({prompt_len} in the prompt, {max_tokens} to generate).",
            "max_tokens",
            "context_length_exceeded",
        )
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=seed,
        stop=req.stop_list(),
        top_logprobs=top_logprobs,
        ignore_eos=req.ignore_eos,
    )


def _text_content(content: Any, i: int) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid("only text content parts are supported", f"messages[{i}].content")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise invalid("content must be a string or a list of text parts", f"messages[{i}].content")


def chat_prompt_ids(service: InferenceService, req: ChatCompletionRequest) -> list[int]:
    messages = [
        {**m, "content": _text_content(m.get("content"), i)} for i, m in enumerate(req.messages)
    ]
    tools = req.tools if req.tool_choice != "none" else None
    kwargs = req.chat_template_kwargs or {}

    def render() -> list[int]:
        try:
            ids = service.tokenizer.apply_chat_template(
                messages,
                tools=tools or None,
                add_generation_prompt=req.add_generation_prompt,
                tokenize=True,
                return_dict=False,
                **kwargs,
            )
        except Exception as exc:  # jinja errors on odd message shapes
            raise invalid(f"chat template failed: {exc}", "messages") from None
        return [int(t) for t in ids]

    key = [messages, tools or None, bool(req.add_generation_prompt), kwargs]
    return service.prompt_cache.ids(key, render)


def completion_prompts(service: InferenceService, req: CompletionRequest) -> list[list[int]]:
    """The request's prompts as token ids (text is tokenized without special tokens)."""
    p = req.prompt
    items: list[Any] = [p] if isinstance(p, str) or all(isinstance(x, int) for x in p) else list(p)
    out: list[list[int]] = []
    for item in items:
        if isinstance(item, str):
            out.append(list(service.tokenizer(item, add_special_tokens=False)["input_ids"]))
            continue
        if any(isinstance(t, bool) or not 0 <= t < service.vocab_size for t in item):
            raise invalid(f"prompt token ids must be in [0, {service.vocab_size})", "prompt")
        out.append([int(t) for t in item])
    if any(not ids for ids in out):
        raise invalid("prompt must not be empty", "prompt")
    return out


def _token_str(service: InferenceService, tid: int) -> str:
    return str(service.tokenizer.decode([tid]))


def _chat_logprobs(service: InferenceService, out: SequenceOutput, k: int) -> dict[str, Any]:
    content = []
    for i, (tid, lp) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
        tok = _token_str(service, tid)
        tops = out.top_logprobs[i] if k else []
        content.append(
            {
                "token": tok,
                "logprob": lp,
                "bytes": list(tok.encode()),
                "top_logprobs": [
                    {
                        "token": (t := _token_str(service, a)),
                        "logprob": b,
                        "bytes": list(t.encode()),
                    }
                    for a, b in tops
                ],
            }
        )
    return {"content": content}


def _completion_logprobs(service: InferenceService, out: SequenceOutput, k: int) -> dict[str, Any]:
    tokens = [_token_str(service, t) for t in out.token_ids]
    offsets, pos = [], 0
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    tops = [{_token_str(service, a): b for a, b in row} for row in out.top_logprobs] if k else None
    return {
        "tokens": tokens,
        "token_logprobs": out.logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _usage(prompt_tokens: int, outputs: list[SequenceOutput]) -> dict[str, int]:
    completion = sum(len(o.token_ids) for o in outputs)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


async def chat_completion(
    service: InferenceService, name: str, req: ChatCompletionRequest
) -> tuple[dict[str, Any], int]:
    _check_model(name, req.model)
    prompt = chat_prompt_ids(service, req)
    k = (req.top_logprobs or 0) if req.logprobs else 0
    rows: list[Row] = [
        (prompt, _params(req, len(prompt), req.requested_max_tokens(), service.max_model_len, s, k))
        for s in _choice_seeds(req, req.n)
    ]
    outputs, version = await service.generate(rows)
    parse_tools = bool(req.tools) and req.tool_choice != "none"
    choices = []
    for i, out in enumerate(outputs):
        content, calls = parse_tool_calls(out.text) if parse_tools else (out.text, [])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        finish = out.finish_reason
        if calls:
            message["tool_calls"] = calls
            finish = "tool_calls" if finish == "stop" else finish
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": finish,
                "logprobs": _chat_logprobs(service, out, k) if req.logprobs else None,
                "token_ids": out.token_ids,
            }
        )
    body = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": choices,
        "usage": _usage(len(prompt), outputs),
        "prompt_token_ids": prompt,
        "policy_version": version,
    }
    return body, version


async def completion(
    service: InferenceService, name: str, req: CompletionRequest
) -> tuple[dict[str, Any], int]:
    _check_model(name, req.model)
    prompts = completion_prompts(service, req)
    k = req.logprobs or 0
    if req.seeds is not None:  # choice i of every prompt: seeds[i]
        seeds = [s for _ in prompts for s in _choice_seeds(req, req.n)]
    else:
        seeds = _seeds(req.seed, req.n * len(prompts))
    rows: list[Row] = []
    for j, prompt in enumerate(prompts):
        for i in range(req.n):
            seed = seeds[j * req.n + i]
            rows.append(
                (prompt, _params(req, len(prompt), req.max_tokens, service.max_model_len, seed, k))
            )
    outputs, version = await service.generate(rows)
    choices = [
        {
            "index": idx,
            "text": out.text,
            "finish_reason": out.finish_reason,
            "logprobs": _completion_logprobs(service, out, k) if req.logprobs is not None else None,
            "prompt_token_ids": rows[idx][0],
            "token_ids": out.token_ids,
        }
        for idx, out in enumerate(outputs)
    ]
    body = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": name,
        "choices": choices,
        "usage": _usage(sum(len(p) for p in prompts), outputs),
        "policy_version": version,
    }
    return body, version
