"""Token ids of chat prompts rendered before.

An RL run sends the same prompts again and again (every epoch, every validation,
and in a group request once per group): rendering the chat template (Jinja, then
the tokenizer) cost ~0.3-0.6 ms a prompt on a 2-core machine, ~5-9 ms of the
embedded server's critical path in each step of the default recipe. Each distinct
prompt is rendered once; later requests copy its ids.
"""

from __future__ import annotations

import json
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["PromptCache", "prompt_cache_for"]

MAX_TOKENS = 1 << 20  # token ids held by a server's cache (4 bytes each: 4 MiB)


class PromptCache:
    """Least recently used prompts' token ids, at most ``max_tokens`` ids in all.

    Safe to use from several threads (the server renders requests on a pool).
    A prompt longer than ``max_tokens // 64`` ids is rendered every time (a long
    agent conversation is rarely sent twice and would push out many short ones).
    """

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._ids: OrderedDict[str, array[int]] = OrderedDict()
        self._held = 0  # token ids in _ids
        self._lock = threading.Lock()

    def ids(self, key_parts: Any, render: Callable[[], list[int]]) -> list[int]:
        """The ids of the prompt described by ``key_parts`` (JSON data: the messages,
        tools and template arguments), from ``render()`` the first time."""
        if self.max_tokens <= 0:  # off
            return render()
        try:
            key = json.dumps(key_parts, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):  # not JSON: render, do not cache
            return render()
        with self._lock:
            hit = self._ids.get(key)
            if hit is not None:
                self._ids.move_to_end(key)
                return hit.tolist()
        ids = render()
        if len(ids) <= self.max_tokens // 64:
            with self._lock:
                if key not in self._ids:
                    self._ids[key] = array("i", ids)
                    self._held += len(ids)
                while self._held > self.max_tokens:
                    _, old = self._ids.popitem(last=False)
                    self._held -= len(old)
        return ids

    def __len__(self) -> int:
        return len(self._ids)


def prompt_cache_for(tokenizer: Any) -> PromptCache:
    """The cache for a server's tokenizer: off when its chat template reads the clock
    (``strftime_now``, e.g. a "Today Date:" line), whose prompts change over time."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    return PromptCache(max_tokens=0 if "strftime_now" in template else MAX_TOKENS)
