"""Demonstration conversations: the format SFT and the warm start read.

A demonstration is one JSON line::

    {"messages": [{"role": "system", ...}, {"role": "user", ...},
                  {"role": "assistant", "content": "", "tool_calls": [...]},
                  {"role": "tool", "content": "46"}, {"role": "assistant", "content": "46"}],
     "tools": [{"type": "function", "function": {...}}]}        # optional

``encode_demo`` renders it with the tokenizer's chat template (tools included),
exactly as the inference service renders a prompt, and masks the tokens of the
assistant turns (from after the generation prompt up to and including the turn's
stop token). The driver's warm start and the trainer's SFT data both read it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.errors import NexrlError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["ROLES", "Demo", "WarmStartError", "encode_demo", "load_demos"]

ROLES = ("system", "user", "assistant", "tool")


class WarmStartError(ValueError, NexrlError):
    """The demonstrations cannot be used (the message names the field, file and line)."""


@dataclass(frozen=True)
class Demo:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    where: str  # "file:line", for error messages


def _check_row(row: Any, where: str) -> Demo:
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        raise WarmStartError(f"{where}: expected an object with a 'messages' list")
    for i, m in enumerate(row["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            got = f", not {m.get('role')!r}" if isinstance(m, dict) and "role" in m else ""
            raise WarmStartError(f"{where}: messages[{i}] needs a role, one of {ROLES}{got}")
        if not isinstance(m.get("content") or "", str):
            raise WarmStartError(f"{where}: messages[{i}].content must be a string")
        if m["role"] == "assistant" and not m.get("content") and not m.get("tool_calls"):
            # nothing to learn but the end of the turn: the model would learn to say nothing
            raise WarmStartError(
                f"{where}: messages[{i}] (assistant) has no 'content' and no 'tool_calls': "
                "nothing to learn from it"
            )
    if not any(m["role"] == "assistant" for m in row["messages"]):
        raise WarmStartError(f"{where}: no assistant message to learn from")
    tools = row.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise WarmStartError(f"{where}: 'tools' must be a list of OpenAI tool entries")
    return Demo(list(row["messages"]), tools, where)


def load_demos(files: Sequence[str | Path], field: str = "data_files") -> list[Demo]:
    """Read and check every demonstration of ``files`` (JSON lines)."""
    demos: list[Demo] = []
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise WarmStartError(f"{field}: {path} not found")
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{field}: {path}:{n}"
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise WarmStartError(f"{where}: not valid JSON ({exc})") from None
            demos.append(_check_row(row, where))
    if not demos:
        raise WarmStartError(f"{field}: {', '.join(map(str, files))} hold no demonstrations")
    return demos


def _render(
    tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], tools: Any, gen: bool
) -> list[int]:
    ids: Any = tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=gen, tokenize=True, return_dict=False
    )
    return [int(t) for t in ids]


def encode_demo(
    tok: PreTrainedTokenizerBase, demo: Demo, stop_ids: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(token ids of the whole conversation, loss mask: 1 on assistant tokens)."""
    full = _render(tok, demo.messages, demo.tools, gen=False)
    mask = [0] * len(full)
    for i, m in enumerate(demo.messages):
        if m["role"] != "assistant":
            continue
        start = len(_render(tok, demo.messages[:i], demo.tools, gen=True))
        upto = _render(tok, demo.messages[: i + 1], demo.tools, gen=False)
        if full[: len(upto)] != upto or len(upto) <= start:
            raise WarmStartError(
                f"{demo.where}: the chat template renders turn {i} differently inside the "
                "whole conversation; it cannot be used for a warm start"
            )
        end = len(upto)
        for k in range(start, len(upto)):
            if upto[k] in stop_ids:  # the turn ends at its stop token (what generation emits)
                end = k + 1
                break
        mask[start:end] = [1] * (end - start)
    return full, mask
