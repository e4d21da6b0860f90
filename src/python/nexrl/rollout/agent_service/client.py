"""A tiny client for the agent service (needs only ``httpx``).

* ``report_reward(url, session, reward, group_id, ...)``: end a session recorded by
  the proxy; its calls become trajectories in the pool.
* ``push_trajectories(url, records)``: for agents that build their own
  trajectories (``nexrl.core.types.Trajectory`` objects or dicts with its fields).

``url`` is the service's address (``http://host:port``, with or without
``/v1``). Every call has a timeout; a refused connection (nothing was sent) is
retried up to ``max_retries`` times, nothing else is (a push is not
idempotent). A 4xx/5xx answer raises ``AgentServiceError`` with the service's
message (which names the record and field). ``token``: the service's bearer
token, sent as ``Authorization: Bearer <token>`` (a service started with one
answers 401 without it).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from nexrl.core.errors import NexrlError

__all__ = ["AgentServiceError", "push_trajectories", "report_reward"]


class AgentServiceError(RuntimeError, NexrlError):
    """The service refused the request or could not be reached."""

    def __init__(self, message: str, *, status_code: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status_code, self.body = status_code, body


_CLIENT: httpx.Client | None = None
_CLIENT_LOCK = threading.Lock()


def _client() -> httpx.Client:
    """One connection pool for the process: a new ``httpx.Client`` per call costs ~40 ms
    (its TLS context), more than a report itself."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = httpx.Client()
        return _CLIENT


def _root(url: str) -> str:
    return url.strip().rstrip("/").removesuffix("/v1")


def _post(
    url: str, json: Any, timeout_s: float, max_retries: int, token: str | None = None
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    last: Exception | None = None
    for attempt in range(max_retries + 1):
        try:
            resp = _client().post(url, json=json, headers=headers, timeout=timeout_s)
            break
        except httpx.ConnectError as exc:
            last = exc
            time.sleep(min(2.0, 0.2 * 2**attempt))
        except httpx.TimeoutException:
            raise AgentServiceError(f"{url} did not answer within {timeout_s:g}s") from None
    else:
        raise AgentServiceError(f"cannot reach the agent service at {url}: {last}")
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        msg = err.get("message") if isinstance(err, dict) else resp.text
        raise AgentServiceError(
            f"agent service answered {resp.status_code}: {msg}",
            status_code=resp.status_code,
            body=body,
        )
    return dict(body or {})


def _record(rec: Any) -> Any:
    if dataclasses.is_dataclass(rec) and not isinstance(rec, type):
        return dataclasses.asdict(rec)
    return rec


def push_trajectories(
    url: str,
    records: Iterable[Mapping[str, Any] | Any],
    *,
    timeout_s: float = 60.0,
    max_retries: int = 2,
    token: str | None = None,
) -> dict[str, Any]:
    """Append ``records`` to the pool in one commit (all or nothing); returns
    ``{"written": n, "group_ids": [...]}``."""
    body = {"trajectories": [_record(r) for r in records]}
    return _post(f"{_root(url)}/v1/trajectories", body, timeout_s, max_retries, token)


def report_reward(
    url: str,
    session: str,
    reward: float,
    group_id: int | str,
    *,
    timeout_s: float = 60.0,
    max_retries: int = 2,
    token: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """End ``session`` with ``reward``; ``fields`` are the other ``RewardReport`` fields
    (run_id, trajectory_mode, train_calls, metrics, extra_info, data_item, ground_truth)."""
    from urllib.parse import quote

    body = {"reward": reward, "group_id": group_id, **fields}
    target = f"{_root(url)}/v1/sessions/{quote(session, safe='')}/reward"
    return _post(target, body, timeout_s, max_retries, token)
