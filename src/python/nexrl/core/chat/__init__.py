"""The chat client every caller of the inference service shares: OpenAI clients
with bounded timeouts/retries, replica round-robin, and token-level parsing of
replies (``Generation``).

It never imports ``backends`` (the engines): callers only speak HTTP. The
service's own side (start, health checks, reloads, restarts) is the
``nexrl.inference`` wing.
"""

from typing import TYPE_CHECKING

from nexrl.core.util.lazy import lazy_names

if TYPE_CHECKING:
    from nexrl.core.chat.balance import RoundRobin, normalize_base_url, normalize_base_urls
    from nexrl.core.chat.client import InferenceClient, make_async_client, make_client
    from nexrl.core.chat.replies import (
        Generation,
        InferenceError,
        parse_chat_completion,
        parse_completion,
    )

# Imported on first use (PEP 562): the client pulls in ``openai`` (~1 s on a slow
# 2-core machine), which a module that only needs ``Generation`` never uses.
_HOME = {
    "RoundRobin": "balance",
    "normalize_base_url": "balance",
    "normalize_base_urls": "balance",
    "Generation": "replies",
    "InferenceClient": "client",
    "InferenceError": "replies",
    "make_async_client": "client",
    "make_client": "client",
    "parse_chat_completion": "replies",
    "parse_completion": "replies",
}


__getattr__ = lazy_names(__name__, _HOME)


__all__ = [
    "Generation",
    "InferenceClient",
    "InferenceError",
    "RoundRobin",
    "make_async_client",
    "make_client",
    "normalize_base_url",
    "normalize_base_urls",
    "parse_chat_completion",
    "parse_completion",
]
