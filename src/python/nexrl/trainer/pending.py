"""``PendingCall``: a trainer call started on every rank, waited on while the
controller keeps working (``TrainerHandle.start``).

One type for both trainer front-ends: ``TrainerGroup`` gives it one Dask actor
future per rank, ``ServiceTrainerGroup`` one ``concurrent.futures`` future (the
service's call on a thread). Each says how failures read (``failure``)::

    pending = trainer.start(RankCall.STEP, batch_ref)
    while not pending.done():           # past pending.deadline: the caller gives up
        ...                             # (harvest rollouts, ...)
        pending.wait(POLL_S)            # returns the moment every rank has answered
    result = pending.result()[0]        # rank 0's; TrainerGroupError names failed ranks
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Generic, NoReturn, Protocol, TypeVar

from nexrl.trainer.errors import TrainerGroupError, TrainerLostError
from nexrl.trainer.heartbeats import Heartbeats, raise_if_gone, raise_if_silent

__all__ = ["Failure", "PendingCall", "RankFuture", "rank_failure"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

GRACE_S = 10.0  # how long the other ranks may still answer once one has failed
#: How long a call whose ranks lost their link to a peer waits for the scheduler to
#: name the rank that left (its removal may lag the collective's error under load).
LOST_PEER_WAIT_S = 15.0
#: gloo's and the socket layer's words for a peer that went away mid-collective.
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


class RankFuture(Protocol[T_co]):
    """One rank's answer: a Dask actor future or a ``concurrent.futures.Future``."""

    def done(self) -> bool: ...

    def result(self, timeout: float | None = None) -> T_co: ...


#: Raises the error for a failed call: ``(method, [(rank, exception), ...])``.
Failure = Callable[[str, list[tuple[int, BaseException]]], NoReturn]


def rank_failure(method: str, errors: list[tuple[int, BaseException]]) -> NoReturn:
    """``TrainerGroupError`` naming the failed ranks and the first one's error."""
    rank, first = errors[0]
    ranks = ", ".join(str(r) for r, _ in errors)
    raise TrainerGroupError(
        f"trainer {method} failed on rank(s) {ranks}; rank {rank}: {type(first).__name__}: {first}",
        tuple(r for r, _ in errors),
    ) from first


def _failed(fut: RankFuture[object]) -> bool:
    """Whether a (done) call raised; an actor future has no status of its own."""
    if not fut.done():
        return False
    try:
        fut.result(timeout=1)
    except Exception:
        return True
    return False


class PendingCall(Generic[T]):
    """A call running on every rank (one future per rank, in rank order).

    ``heartbeats`` (the group's ``Heartbeats``): while waiting, a rank whose worker
    has gone silent ends the wait with ``TrainerSilentError`` instead of the deadline.
    ``failure`` raises the error of a call that failed on some ranks.
    """

    def __init__(
        self,
        method: str,
        futures: Sequence[RankFuture[T]],
        deadline: float,
        heartbeats: Heartbeats | None = None,
        failure: Failure = rank_failure,
    ) -> None:
        self.method = method
        self.futures = list(futures)
        self.deadline = deadline
        self.heartbeats = heartbeats
        self.failure = failure

    def done(self) -> bool:
        return all(f.done() for f in self.futures)

    def check_heartbeats(self) -> None:
        """``TrainerSilentError`` naming the ranks whose worker has gone silent."""
        raise_if_silent(self.method, self.heartbeats)

    def wait(self, timeout_s: float) -> bool:
        """Block until every rank has answered or ``timeout_s`` passed (no sleep past
        the answer: a poll loop wakes as soon as the step is done); whether done.
        Errors are not raised here: ``result()`` raises them; a silent rank is
        (``TrainerSilentError``)."""
        self.check_heartbeats()
        end = time.monotonic() + timeout_s
        for fut in self.futures:
            left = end - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(Exception):
                fut.result(timeout=left)
        return self.done()

    def result(self) -> list[T]:
        """Per-rank results in rank order; ``failure`` names the failed ranks (the
        others get a short grace period), a rank still running at the deadline, or a
        rank whose worker went silent (``TrainerSilentError``). When a rank's worker
        has left the scheduler, that rank is named (``TrainerLostError``), not the
        others' errors it caused (gloo: "Connection closed by peer")."""
        while not self.done() and time.monotonic() < self.deadline:
            if any(_failed(f) for f in self.futures):
                break  # the failed ranks are named below; the others get the grace
            self.wait(min(1.0, max(0.0, self.deadline - time.monotonic())))
        results: list[T] = []
        errors: list[tuple[int, BaseException]] = []
        for rank, fut in enumerate(self.futures):
            wait = max(1.0, self.deadline - time.monotonic())
            if errors:
                wait = min(wait, GRACE_S)
            try:
                results.append(fut.result(timeout=wait))
            except Exception as exc:
                errors.append((rank, exc))
        if errors:
            try:
                self._raise_if_a_peer_left(errors)
            except TrainerLostError as lost:
                raise lost from errors[0][1]
            self.failure(self.method, errors)
        return results

    def _raise_if_a_peer_left(self, errors: list[tuple[int, BaseException]]) -> None:
        """``TrainerLostError`` when a rank's worker has left the scheduler. Where the
        errors say a peer went away (gloo: "Connection closed by peer"), the
        scheduler is asked again for up to ``LOST_PEER_WAIT_S``: a node cut off the
        network is removed once Dask's comm timeout passes, which can come after the
        link is back and the others' collective failed."""
        raise_if_gone(self.method, self.heartbeats, fresh=True)
        if self.heartbeats is None or not any(
            word in str(exc) for _, exc in errors for word in PEER_LOST
        ):
            return
        end = min(self.deadline, time.monotonic() + LOST_PEER_WAIT_S)
        while time.monotonic() < end:
            time.sleep(1.0)
            raise_if_gone(self.method, self.heartbeats, fresh=True)
