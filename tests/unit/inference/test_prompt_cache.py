"""``PromptCache``: the embedded server's chat prompts rendered once (LRU by tokens)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded.openai_api import invalid
from backends.inference.embedded.prompt_cache import PromptCache, prompt_cache_for
from backends.inference.embedded.protocol import OpenAIError


def _renderer(calls: list[str], ids: list[int], name: str) -> Callable[[], list[int]]:
    def render() -> list[int]:
        calls.append(name)
        return list(ids)

    return render


def test_a_prompt_is_rendered_once_and_its_ids_copied() -> None:
    cache, calls = PromptCache(), list[str]()
    key: Any = [[{"role": "user", "content": "hi"}], None, True, {}]
    first = cache.ids(key, _renderer(calls, [1, 2, 3], "a"))
    first.append(99)  # a caller changing its list must not change the cached ids
    same_order_other_dict: Any = [[{"content": "hi", "role": "user"}], None, True, {}]
    assert cache.ids(same_order_other_dict, _renderer(calls, [7], "b")) == [1, 2, 3]
    assert calls == ["a"] and len(cache) == 1
    # every part of the key counts: the generation prompt, the tools, the template args
    others: list[Any] = [
        [[{"role": "user", "content": "hi"}], None, False, {}],
        [[{"role": "user", "content": "hi"}], [{"type": "function"}], True, {}],
        [[{"role": "user", "content": "hi"}], None, True, {"enable_thinking": False}],
    ]
    for other in others:
        assert cache.ids(other, _renderer(calls, [4], "c")) == [4]
    assert calls == ["a", "c", "c", "c"]


def test_least_recently_used_prompts_go_first_within_the_token_budget() -> None:
    cache = PromptCache(max_tokens=64 * 4)  # prompts of up to 4 ids are kept
    calls: list[str] = []
    for name in "abc":
        cache.ids(name, _renderer(calls, [1, 2, 3, 4], name))
    assert len(cache) == 3
    cache.ids("a", _renderer(calls, [0], "a2"))  # a is now the most recent
    for i in range(62):  # 3 + 62 prompts of 4 ids > 256: the least recent goes
        cache.ids(f"p{i}", _renderer(calls, [1, 2, 3, 4], f"p{i}"))
    assert cache._held <= cache.max_tokens
    calls.clear()
    cache.ids("a", _renderer(calls, [1, 2, 3, 4], "a"))
    cache.ids("b", _renderer(calls, [1, 2, 3, 4], "b"))
    assert calls == ["b"]  # b (least recently used) was dropped, a was kept


def test_long_prompts_and_keys_that_are_not_json_are_rendered_every_time() -> None:
    cache, calls = PromptCache(max_tokens=64 * 4), list[str]()
    for _ in range(2):
        assert cache.ids("long", _renderer(calls, [1, 2, 3, 4, 5], "long")) == [1, 2, 3, 4, 5]
        assert cache.ids([object()], _renderer(calls, [6], "odd")) == [6]
    assert calls == ["long", "odd", "long", "odd"] and len(cache) == 0


def test_a_failed_render_is_not_cached() -> None:
    cache, attempts = PromptCache(), []

    def bad() -> list[int]:
        attempts.append(1)
        raise invalid("chat template failed: boom", "messages")

    for _ in range(2):
        with pytest.raises(OpenAIError, match="chat template failed"):
            cache.ids("k", bad)
    assert len(attempts) == 2 and len(cache) == 0


def test_threads_rendering_at_once_get_their_own_prompts_ids() -> None:
    cache = PromptCache(max_tokens=64 * 8)
    errors: list[str] = []

    def worker(t: int) -> None:
        for i in range(300):
            key = f"{(t * 7 + i) % 50}"
            ids = cache.ids(key, _renderer([], [int(key)] * 3, key))
            if ids != [int(key)] * 3:
                errors.append(f"{key}: {ids}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and cache._held <= cache.max_tokens
    assert cache._held == sum(len(v) for v in cache._ids.values())


def test_a_template_that_reads_the_clock_is_rendered_every_time(
    tiny_model_dir: Path,
) -> None:
    """A "Today Date:" line (``strftime_now``) changes the prompt over time: such a
    tokenizer's server cache is off; the default tiny model's (Qwen2) is on."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "hi"}]

    def render_with(t: Any, calls: list[str]) -> Callable[[], list[int]]:
        def render() -> list[int]:
            calls.append("render")
            return list(t.apply_chat_template(messages, return_dict=False))

        return render

    calls: list[str] = []
    cache = prompt_cache_for(tok)
    for _ in range(2):
        cache.ids([messages], render_with(tok, calls))
    assert calls == ["render"]

    tok.chat_template = (
        "Today Date: {{ strftime_now('%d %b %Y') }}\n"
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    calls = []
    cache = prompt_cache_for(tok)
    first = cache.ids([messages], render_with(tok, calls))
    assert str(tok.decode(first)).startswith("Today Date: ")
    cache.ids([messages], render_with(tok, calls))
    assert calls == ["render", "render"] and len(cache) == 0
