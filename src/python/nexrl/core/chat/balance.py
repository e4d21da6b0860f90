"""Replica base URLs: normalisation and thread-safe round-robin selection."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/`` and ``http://h:p/v1`` all give ``http://h:p``."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"base URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")


def normalize_base_urls(urls: str | Iterable[str]) -> list[str]:
    """One URL or several (a comma-separated string or a list), normalised and de-duplicated."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = list(dict.fromkeys(normalize_base_url(u) for u in items if u.strip()))
    if not out:
        raise ValueError("at least one inference base URL is required")
    return out


class RoundRobin(Generic[T]):
    """Cycle over a fixed, non-empty list; safe to call from several threads."""

    def __init__(self, items: Sequence[T]) -> None:
        if not items:
            raise ValueError("RoundRobin needs at least one item")
        self.items: tuple[T, ...] = tuple(items)
        self._cycle = itertools.cycle(self.items)
        self._lock = threading.Lock()

    def next(self) -> T:
        with self._lock:
            return next(self._cycle)

    def __len__(self) -> int:
        return len(self.items)
