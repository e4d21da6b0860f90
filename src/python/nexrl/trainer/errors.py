"""``TrainerError``: the trainers' user-facing error."""

from __future__ import annotations

from nexrl.errors import NexrlError

__all__ = ["TrainerError"]


class TrainerError(RuntimeError, NexrlError):
    """A trainer was misused or got a batch it cannot train on; the message says why."""
