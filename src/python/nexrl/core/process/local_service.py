"""``LocalService``: what every server nexrl starts on ``host:port`` shares.

Its URLs (``base_url``, and ``openai_base_url`` for OpenAI clients) and its
use as a context manager: ``with Server(...) as s:`` starts it (unless it is
already started) and stops it on the way out, whatever happened in between.
Subclasses implement ``started``, ``start`` (binding ``port``; 0 = a free
port) and ``stop``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

__all__ = ["LocalService"]


class LocalService(ABC):
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url`` + ``/v1``: the ``base_url`` of an ``openai.OpenAI`` client."""
        return f"{self.base_url}/v1"

    @property
    @abstractmethod
    def started(self) -> bool:
        """Whether ``start`` has run (and ``stop`` has not)."""

    @abstractmethod
    def start(self) -> Self:
        """Bind ``port`` (0 = a free one), start serving, return self."""

    @abstractmethod
    def stop(self) -> None:
        """Stop serving; idempotent."""

    def __enter__(self) -> Self:
        return self if self.started else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
