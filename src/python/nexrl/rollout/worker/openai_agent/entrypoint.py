"""The agent function a recipe names, loaded and checked before any cluster starts.

``rollout_worker.agent_entrypoint: "path/to/agent.py:run"`` names a function
(sync or ``async``) that can be called as
``run(task, base_url=..., api_key=..., model=...)`` and returns the final answer
(a string). Every problem is reported with the field, the file and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexrl.core.config.errors import RecipeError
from nexrl.core.errors import NexrlError

__all__ = ["ENTRYPOINT_FIELD", "AgentEntrypoint", "AgentError", "load_entrypoint"]

ENTRYPOINT_FIELD = "rollout_worker.agent_entrypoint"
KEYWORDS = ("base_url", "api_key", "model")
CONTRACT = "run(task, *, base_url, api_key, model) -> str"


class AgentError(RuntimeError, NexrlError):
    """The agent function failed an episode (raised, timed out, returned no answer,
    made no model call); the message names the function."""


@dataclass(frozen=True)
class AgentEntrypoint:
    """A loaded agent function: ``name`` is how the recipe wrote it."""

    fn: Callable[..., Any]
    name: str
    is_async: bool


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an async callable object
    )


def load_entrypoint(spec: str, roots: Sequence[Path]) -> AgentEntrypoint:
    """Import ``"file.py:function"`` (searched under ``roots``) and check it can be called
    as the contract says; raises ``RecipeError`` naming ``rollout_worker.agent_entrypoint``."""
    from nexrl.core.plugins import load_object

    file, sep, name = str(spec).rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise RecipeError(
            [
                f"{ENTRYPOINT_FIELD}: '{spec}' is not 'path/to/agent.py:function' (a file, a "
                "colon, a function name)"
            ]
        )
    fn = load_object(file, name, roots, ENTRYPOINT_FIELD)
    if isinstance(fn, type) or not callable(fn):
        raise RecipeError(
            [
                f"{ENTRYPOINT_FIELD}: '{name}' in {file} is a {type(fn).__name__}, not a function "
                f"({CONTRACT})"
            ]
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None  # a builtin without a signature: trust it
    if sig is not None:
        try:
            sig.bind({}, **dict.fromkeys(KEYWORDS, ""))
        except TypeError as exc:
            raise RecipeError(
                [
                    f"{ENTRYPOINT_FIELD}: {name}{sig} in {file} cannot be called as "
                    f"{name}(task, base_url=..., api_key=..., model=...) ({exc}); the agent "
                    f"function's contract is {CONTRACT}"
                ]
            ) from None
    return AgentEntrypoint(fn=fn, name=str(spec), is_async=_is_async(fn))
