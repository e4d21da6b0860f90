"""Objects built once per worker process (rollout workers' classes, evaluators,
agent configs, clients): ``process_cached(key, build)``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CACHE_LOCK", "process_cached"]

T = TypeVar("T")
_CACHE: dict[tuple[Any, ...], Any] = {}
CACHE_LOCK = threading.Lock()


def process_cached(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    """``build()`` the first time ``key`` is asked for in this process, then the same object."""
    with CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        value: T = _CACHE[key]
        return value
