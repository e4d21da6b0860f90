"""Inference, client side: OpenAI clients with bounded timeouts/retries, replica
round-robin, and token-level parsing of replies (``Generation``).

The package never imports ``backends`` (the engines): rollouts only speak HTTP.
``nexrl.inference.supervisor`` (not imported here) is the driver's side: it
starts, health-checks, reloads and restarts the service.
"""

from nexrl.inference.balance import RoundRobin, normalize_base_url, normalize_base_urls
from nexrl.inference.client import (
    Generation,
    InferenceClient,
    InferenceError,
    make_async_client,
    make_client,
    parse_chat_completion,
    parse_completion,
)

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
