"""Session bookkeeping: limits, idle expiry and what a late report is told."""

from __future__ import annotations

import pytest

from nexrl.core.chat import Generation
from nexrl.rollout.agent_service.errors import ServiceError
from nexrl.rollout.agent_service.sessions import Call, SessionLimits, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def call(seq: int, n_prompt: int = 3, n_reply: int = 2) -> Call:
    gen = Generation(
        index=0,
        text="x",
        prompt_token_ids=list(range(n_prompt)),
        token_ids=list(range(n_reply)),
        logprobs=[-0.1] * n_reply,
        finish_reason="stop",
        policy_version=0,
    )
    return Call(seq, "chat", (gen,))


def record(store: SessionStore, sid: str) -> None:
    session, seq = store.begin_call(sid)
    store.end_call(session, call(seq))


def test_idle_sessions_expire_and_free_their_tokens() -> None:
    clock = Clock()
    store = SessionStore(SessionLimits(ttl_s=10), clock=clock)
    record(store, "a")
    record(store, "a")
    assert store.total_tokens == 10 and len(store) == 1
    clock.now = 11
    record(store, "b")  # any activity drops idle sessions
    assert len(store) == 1 and store.total_tokens == 5 and store.expired == 1
    with pytest.raises(ServiceError, match="already ended \\(expired after 10s idle\\)") as exc:
        store.begin_close("a")
    assert exc.value.status == 410


def test_a_session_with_a_call_in_flight_neither_expires_nor_closes() -> None:
    clock = Clock()
    store = SessionStore(SessionLimits(ttl_s=10), clock=clock)
    record(store, "a")
    session, seq = store.begin_call("a")
    clock.now = 100
    record(store, "other")
    assert store.get("a") is session
    with pytest.raises(ServiceError, match="still running") as exc:
        store.begin_close("a")
    assert exc.value.status == 409
    store.end_call(session, call(seq))
    closing = store.begin_close("a")
    assert [c.seq for c in closing.ordered_calls()] == [0, 1]
    store.finish_close(closing, "rewarded")
    assert store.total_tokens == 5


def test_token_limits_and_failed_calls() -> None:
    store = SessionStore(SessionLimits(max_tokens=6, max_total_tokens=8))
    record(store, "a")
    record(store, "a")  # 10 tokens: the limit is checked before a call
    with pytest.raises(ServiceError, match="max_tokens_per_session") as exc:
        store.begin_call("a")
    assert exc.value.status == 413
    with pytest.raises(ServiceError, match="max_total_tokens"):
        store.begin_call("b")
    # a session whose only call failed holds nothing
    store.finish_close(store.begin_close("a"), "discarded")
    session, _ = store.begin_call("c")
    store.end_call(session, None)
    assert len(store) == 0 and store.total_tokens == 0


def test_a_failed_report_reopens_and_ended_ids_are_remembered_boundedly() -> None:
    store = SessionStore(SessionLimits(remember_ended=2))
    record(store, "a")
    store.finish_close(store.begin_close("a"), None)  # the write failed: retry later
    record(store, "a")
    store.finish_close(store.begin_close("a"), "rewarded")
    for sid in ("b", "c"):
        record(store, sid)
        store.finish_close(store.begin_close(sid), "rewarded")
    with pytest.raises(ServiceError, match="unknown session 'a'"):
        store.begin_close("a")  # forgotten (only the last 2 ended ids are kept)
    with pytest.raises(ServiceError, match="already ended"):
        store.begin_close("c")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 300, "tab\there"])
def test_bad_session_ids_are_refused(bad: str) -> None:
    from nexrl.rollout.agent_service.sessions import check_session_id

    with pytest.raises(ServiceError, match="session id"):
        check_session_id(bad, "X-NexRL-Session")
