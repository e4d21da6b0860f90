"""Tool calls in chat completions: Hermes/Qwen format in the model's text.

The chat template renders ``tools``; the model writes a call as
``<tool_call>{"name": "...", "arguments": {...}}</tool_call>`` (an unclosed
final block is accepted when its JSON parses). Blocks whose JSON does not
parse stay in the content as text.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _as_call(payload: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": obj["name"],
            "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
        },
    }


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split model text into (content, OpenAI ``tool_calls``).

    Content is the text outside parsed blocks, stripped; ``None`` when empty
    and at least one call was found.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        call = _as_call(match.group(1))
        if call is None:
            continue
        kept.append(text[pos : match.start()])
        pos = match.end()
        calls.append(call)
    kept.append(text[pos:])
    if not calls:
        return text, []
    content = "".join(kept).strip()
    return (content or None), calls
