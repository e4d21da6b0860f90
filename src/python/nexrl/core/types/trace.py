"""An agent episode's trace: what happened inside it, span by span.

Every model call and every tool call of an episode is one span, a JSON-able dict::

    {"kind": "llm", "name": <model>, "start_s": 0.0, "duration_s": 0.41,
     "prompt_tokens": 52, "completion_tokens": 9, "finish_reason": "tool_calls",
     "tool_calls": 1, "error": None}
    {"kind": "tool", "name": "calculator", "start_s": 0.42, "duration_s": 0.003,
     "arguments": {"expression": "3*4"}, "result": "12", "error": None}

``start_s`` is seconds since the episode started; a failed tool (it raised, timed
out, was unknown, got arguments that are not JSON, returned something that is
not JSON) has its ``error`` set, so it shows in the trace and not only in a log
line. Texts (a tool's result and arguments) are cut at ``MAX_TEXT`` characters.

The trace travels with the episode (``Episode.trace``) and is stored with each
of its trajectories in the pool (``extra_info["trace"]``: the trajectory's meta
JSON); ``nexrl.core.pool.read_traces`` reads them back and the run's dashboard page
shows a selected sample's.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["MAX_TEXT", "TRACE_KEY", "EpisodeTrace", "llm_span", "tool_span", "trace_of"]

TRACE_KEY = "trace"  # the key in a trajectory's extra_info
MAX_TEXT = 500


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"… (+{len(text) - MAX_TEXT})"


def llm_span(
    start_s: float,
    duration_s: float,
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish_reason: str | None,
    tool_calls: int = 0,
    error: str | None = None,
) -> dict[str, Any]:
    """A model call's span (module doc)."""
    return {
        "kind": "llm",
        "name": model,
        "start_s": round(start_s, 6),
        "duration_s": round(duration_s, 6),
        "prompt_tokens": int(prompt_tokens),
        "completion_tokens": int(completion_tokens),
        "finish_reason": finish_reason,
        "tool_calls": int(tool_calls),
        "error": error,
    }


def tool_span(
    start_s: float, duration_s: float, *, name: str, arguments: Any, result: str, error: str | None
) -> dict[str, Any]:
    """A tool call's span (module doc); texts cut at ``MAX_TEXT``."""
    return {
        "kind": "tool",
        "name": name,
        "start_s": round(start_s, 6),
        "duration_s": round(duration_s, 6),
        "arguments": arguments if isinstance(arguments, dict) else _cut(str(arguments)),
        "result": _cut(result),
        "error": None if error is None else _cut(error),
    }


class EpisodeTrace:
    """The spans of one episode, timed from its start (module doc)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.spans: list[dict[str, Any]] = []

    def now(self) -> float:
        """Seconds since the episode started (a span's ``start_s``)."""
        return time.perf_counter() - self.t0

    def llm(self, start_s: float, **fields: Any) -> None:
        """A model call that started at ``start_s`` and ended now (``llm_span``'s fields)."""
        self.spans.append(llm_span(start_s, self.now() - start_s, **fields))

    def tool(self, start_s: float, **fields: Any) -> None:
        """A tool call that started at ``start_s`` and ended now (``tool_span``'s fields)."""
        self.spans.append(tool_span(start_s, self.now() - start_s, **fields))


def trace_of(extra_info: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The spans stored in a trajectory's ``extra_info`` ([] when it has none)."""
    spans = (extra_info or {}).get(TRACE_KEY)
    return list(spans) if isinstance(spans, list) else []
