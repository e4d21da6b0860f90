"""The trainers' user-facing errors: ``TrainerError`` (one rank's trainer) and
``TrainerGroupError`` (a trainer front-end: a rank failed, was lost or went silent,
or the training service failed)."""

from __future__ import annotations

from nexrl.core.errors import NexrlError

__all__ = ["TrainerError", "TrainerGroupError", "TrainerLostError", "TrainerSilentError"]


class TrainerError(RuntimeError, NexrlError):
    """A trainer was misused or got a batch it cannot train on; the message says why."""


class TrainerGroupError(RuntimeError, NexrlError):
    """Trainer actors could not be placed, or a collective call failed on some rank
    (``ranks``: the ranks that failed, when known)."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class TrainerLostError(TrainerGroupError):
    """A trainer rank's worker is gone: its process, its job or its node died."""


class TrainerSilentError(TrainerGroupError):
    """A trainer rank's worker sends no heartbeat: stopped or wedged (``Heartbeats``)."""
