"""``TrainerHandle``: what a controller drives a trainer through, whichever runs it.

Two front-ends implement it:

* ``nexrl.trainer.actor.TrainerGroup`` (``trainer.mode: self-hosted``): one Dask
  actor per data-parallel rank, every call a collective on all of them;
* ``nexrl.trainer.service.group.ServiceTrainerGroup`` (``trainer.mode:
  training-service``): one client of a training service, "rank 0" alone.

A controller starts a step and keeps working while it runs::

    pending = trainer.start(RankCall.STEP, batch_ref)         # a PendingCall
    while not pending.done(): ...; pending.wait(POLL_S)
    result = pending.result()[0]                       # rank 0's StepResult

``call``/``start`` take a ``RankCall`` (``nexrl.trainer.rank_calls``: the table
of every call, what it takes and answers); the named wrappers (``RankZeroCalls``)
return rank 0's answer. ``heartbeats``/``check_heartbeats`` watch the workers the trainer runs on
(a training service has none: ``None`` and a no-op). Failures raise
``TrainerGroupError`` (``nexrl.trainer.errors``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from nexrl.trainer.heartbeats import Heartbeats
from nexrl.trainer.pending import PendingCall
from nexrl.trainer.rank_calls import RankCall
from nexrl.trainer.result import StepResult

__all__ = ["RankZeroCalls", "TrainerHandle"]


@runtime_checkable
class TrainerHandle(Protocol):
    """A running trainer, as a controller sees it (module doc)."""

    #: Seconds a call may run before ``PendingCall.result`` gives up on it.
    timeout_s: float

    @property
    def world_size(self) -> int:
        """Data-parallel ranks (1 for a training service)."""
        ...

    @property
    def heartbeats(self) -> Heartbeats | None:
        """The heartbeats of the ranks' workers (``QuietNotice.line``); None when there
        are none to watch."""
        ...

    def check_heartbeats(self, what: str) -> None:
        """``TrainerSilentError`` when a rank's worker has gone silent, also between
        calls (``what``: what the caller waits for)."""
        ...

    def start(
        self, method: RankCall, *args: Any, timeout_s: float | None = None
    ) -> PendingCall[Any]:
        """Start ``method`` on every rank and return at once."""
        ...

    def call(self, method: RankCall, *args: Any, timeout_s: float | None = None) -> list[Any]:
        """``start(...).result()``: the per-rank results in rank order."""
        ...

    def setup_info(self) -> list[dict[str, Any]]:
        """Every rank's ``describe()`` (global step, policy version, resume notes...)."""
        ...

    def step(self, batch: Any, /) -> StepResult:
        """One training step on a ``BatchRef`` or a ``save_batch`` file; rank 0's ``StepResult``."""
        ...

    def train_step(self, batch: Any, /) -> dict[str, float]:
        """``step`` as its metrics row."""
        ...

    def publish_snapshot(self) -> str | None:
        """Publish the current weights; the snapshot's path."""
        ...

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> str | None:
        """Checkpoint the trainer with the caller's ``extra_state``; its path."""
        ...

    def close(self) -> None:
        """Release the trainer (idempotent enough to run from a ``finally``)."""
        ...


class RankZeroCalls(ABC):
    """``call`` and the named calls of a ``TrainerHandle`` (each rank 0's answer to
    ``call``), on top of the front-end's own ``start``."""

    @abstractmethod
    def start(
        self, method: RankCall, *args: Any, timeout_s: float | None = None
    ) -> PendingCall[Any]:
        """Start ``method`` on every rank; the pending call of the front-end."""

    def call(self, method: RankCall, *args: Any, timeout_s: float | None = None) -> list[Any]:
        """``start(...).result()``: the per-rank results in rank order."""
        return self.start(method, *args, timeout_s=timeout_s).result()

    def setup_info(self) -> list[dict[str, Any]]:
        return self.call(RankCall.DESCRIBE)

    def step(self, batch: Any, /) -> StepResult:
        """One step on the global batch (a ``BatchRef``, a ``save_batch`` path; the self-hosted group
        also takes a ``Batch``) as rank 0's ``StepResult`` (it holds the snapshot's path)."""
        result: StepResult = self.call(RankCall.STEP, _sendable(batch))[0]
        return result

    def train_step(self, batch: Any, /) -> dict[str, float]:
        """``step`` as its metrics row."""
        metrics: dict[str, float] = self.call(RankCall.TRAIN_STEP, _sendable(batch))[0]
        return metrics

    def publish_snapshot(self) -> str | None:
        path: str | None = self.call(RankCall.PUBLISH_SNAPSHOT)[0]
        return path

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> str | None:
        path: str | None = self.call(RankCall.SAVE_CHECKPOINT, extra_state)[0]
        return path


def _sendable(batch: Any) -> Any:
    return str(batch) if isinstance(batch, Path) else batch
