"""Recorded sessions: each model call an agent made under one session id, bounded.

A session opens with its first model call and ends when its reward is
reported (its calls become trajectories), when it is discarded, or when it has
been idle for ``ttl_s`` (dropped and counted, never written). Limits keep the
memory bounded: at most ``max_sessions`` open sessions, ``max_calls`` calls and
``max_tokens`` recorded tokens per session, ``max_total_tokens`` over all of
them. A call past a limit is refused with a clear error before it reaches the
inference service. The ids of ended sessions are remembered (the last
``remember_ended``) so a late or repeated reward report says what happened
instead of "unknown".
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nexrl.core.chat import Generation
from nexrl.rollout.agent_service.errors import ServiceError

__all__ = ["Call", "Session", "SessionLimits", "SessionStore"]

MAX_SESSION_ID_LEN = 256


@dataclass(frozen=True)
class SessionLimits:
    ttl_s: float = 3600.0
    max_sessions: int = 4096
    max_calls: int = 256
    max_tokens: int = 1_000_000
    max_total_tokens: int = 50_000_000
    remember_ended: int = 65536

    def __post_init__(self) -> None:
        for name in ("ttl_s", "max_sessions", "max_calls", "max_tokens", "max_total_tokens"):
            if not getattr(self, name) > 0:
                raise ValueError(f"session limit {name} must be > 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Call:
    """One model call as the inference service answered it (one ``Generation`` per choice)."""

    seq: int
    endpoint: str  # "chat" or "completions"
    generations: tuple[Generation, ...]
    started: float = 0.0  # time.time() when the agent's request arrived
    duration_s: float = 0.0  # until the inference service's reply
    # the request's tool messages (role "tool": the agent's results of earlier tool calls)
    tool_results: tuple[dict[str, Any], ...] = ()

    @property
    def tokens(self) -> int:
        return sum(len(g.prompt_token_ids) + len(g.token_ids) for g in self.generations)


@dataclass
class Session:
    id: str
    created: float
    last_used: float
    calls: list[Call] = field(default_factory=list)
    tokens: int = 0
    in_flight: int = 0
    next_seq: int = 0
    closing: bool = False

    def ordered_calls(self) -> list[Call]:
        """Calls in the order they were made (concurrent calls finish in any order)."""
        return sorted(self.calls, key=lambda c: c.seq)

    def summary(self) -> dict[str, Any]:
        return {
            "session": self.id,
            "state": "closing" if self.closing else "open",
            "calls": len(self.calls),
            "in_flight": self.in_flight,
            "tokens": self.tokens,
            "created": self.created,
            "last_used": self.last_used,
        }


def check_session_id(sid: str, source: str) -> str:
    if not sid or len(sid) > MAX_SESSION_ID_LEN or not sid.isprintable() or " " in sid:
        raise ServiceError(
            400,
            f"{source}: session id {sid[:40]!r} must be 1-{MAX_SESSION_ID_LEN} printable "
            "characters without spaces",
            param=source,
            code="invalid_session_id",
        )
    return sid


class SessionStore:
    """Open sessions and the ids of ended ones; thread-safe."""

    def __init__(
        self, limits: SessionLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or SessionLimits()
        self.clock = clock
        self._open: dict[str, Session] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()  # id -> "rewarded" | "expired" | ...
        self._lock = threading.Lock()
        self.total_tokens = 0
        self.expired = 0  # sessions dropped for idling past ttl_s (never written)

    def __len__(self) -> int:
        return len(self._open)

    # -- recording ------------------------------------------------------------
    def begin_call(self, sid: str) -> tuple[Session, int]:
        """Open (or continue) ``sid`` for one more call; returns the session and the call's seq."""
        lim = self.limits
        with self._lock:
            self._expire_locked()
            s = self._open.get(sid)
            if s is None:
                self._refuse_ended(sid, "make more model calls in it")
                if len(self._open) >= lim.max_sessions:
                    raise ServiceError(
                        503,
                        f"{lim.max_sessions} sessions are open (max_sessions): report their "
                        "rewards (POST /v1/sessions/{id}/reward) or discard them first",
                        code="too_many_sessions",
                    )
            else:
                if s.closing:
                    raise ServiceError(
                        409, f"session {sid!r} is being closed (its reward is being reported)"
                    )
                if len(s.calls) + s.in_flight >= lim.max_calls:
                    raise ServiceError(
                        413,
                        f"session {sid!r} has {lim.max_calls} model calls "
                        "(max_calls_per_session): report its reward and continue under a new "
                        "session id",
                        code="session_too_long",
                    )
                if s.tokens >= lim.max_tokens:
                    raise ServiceError(
                        413,
                        f"session {sid!r} has recorded {s.tokens} tokens (max_tokens_per_session"
                        f" {lim.max_tokens}): report its reward and continue under a new "
                        "session id",
                        code="session_too_long",
                    )
            if self.total_tokens >= lim.max_total_tokens:
                raise ServiceError(
                    503,
                    f"the service holds {self.total_tokens} recorded tokens (max_total_tokens): "
                    "report the rewards of finished sessions first",
                    code="service_full",
                )
            now = self.clock()
            if s is None:  # created only once every check passed
                s = self._open[sid] = Session(sid, created=now, last_used=now)
            s.in_flight += 1
            s.last_used = now
            seq, s.next_seq = s.next_seq, s.next_seq + 1
            return s, seq

    def end_call(self, s: Session, call: Call | None) -> None:
        """The call started by ``begin_call`` returned (``call``) or failed (None)."""
        with self._lock:
            s.in_flight -= 1
            s.last_used = self.clock()
            if call is not None:
                s.calls.append(call)
                s.tokens += call.tokens
                self.total_tokens += call.tokens
            if not s.calls and not s.in_flight and self._open.get(s.id) is s:
                del self._open[s.id]  # a session whose only calls failed holds nothing

    # -- closing --------------------------------------------------------------
    def begin_close(self, sid: str) -> Session:
        """Mark ``sid`` closing (no new calls) and return it; the caller then calls
        ``finish_close``."""
        with self._lock:
            self._expire_locked()
            s = self._open.get(sid)
            if s is None:
                self._refuse_ended(sid, "report a reward for it")
                raise ServiceError(
                    404,
                    f"unknown session {sid!r}: no model call was recorded under it (the "
                    "session id is the X-NexRL-Session header or the API key of the calls)",
                    param="session",
                    code="unknown_session",
                )
            if s.closing:
                raise ServiceError(
                    409, f"session {sid!r}: a reward report for it is already in progress"
                )
            if s.in_flight:
                raise ServiceError(
                    409,
                    f"session {sid!r} has {s.in_flight} model call(s) still running: report "
                    "the reward after they return",
                    code="calls_in_flight",
                )
            s.closing = True
            return s

    def finish_close(self, s: Session, outcome: str | None) -> None:
        """``outcome`` ("rewarded", "discarded") ends the session; None reopens it (the
        report failed and may be retried)."""
        with self._lock:
            if outcome is None:
                s.closing = False
                s.last_used = self.clock()
                return
            self._drop_locked(s, outcome)

    def get(self, sid: str) -> Session:
        with self._lock:
            s = self._open.get(sid)
            if s is None:
                self._refuse_ended(sid, "look it up")
                raise ServiceError(404, f"unknown session {sid!r}", code="unknown_session")
            return s

    # -- internals ------------------------------------------------------------
    def _refuse_ended(self, sid: str, action: str) -> None:
        how = self._ended.get(sid)
        if how == "rewarded":
            raise ServiceError(
                409,
                f"session {sid!r} already ended: its reward was reported; cannot {action} "
                "(use a new session id per episode)",
                code="session_ended",
            )
        if how is not None:
            raise ServiceError(
                410 if how == "expired" else 409,
                f"session {sid!r} already ended ({how}"
                + (f" after {self.limits.ttl_s:g}s idle" if how == "expired" else "")
                + f"); cannot {action} (use a new session id per episode)",
                code=f"session_{how}",
            )

    def _drop_locked(self, s: Session, outcome: str) -> None:
        if self._open.get(s.id) is s:
            del self._open[s.id]
        self.total_tokens -= s.tokens
        self._ended[s.id] = outcome
        self._ended.move_to_end(s.id)
        while len(self._ended) > self.limits.remember_ended:
            self._ended.popitem(last=False)

    def _expire_locked(self) -> None:
        horizon = self.clock() - self.limits.ttl_s
        for s in [
            s
            for s in self._open.values()
            if s.last_used < horizon and not s.in_flight and not s.closing
        ]:
            self._drop_locked(s, "expired")
            self.expired += 1
