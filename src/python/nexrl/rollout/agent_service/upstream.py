"""Forwarding to the inference service: async HTTP, bounded timeouts and retries.

Requests go round-robin over the service's replicas. A replica that refuses
the connection (the request never reached it, so nothing was generated), or a
connection that closed before any reply came (a kept-alive connection the server
closed as idle just as it was reused: seen under load, 1 call in ~2,400, as a
``ReadError``; or a server that died mid-request), is retried on the next one, at
most ``max_retries`` times. Nothing is recorded before a reply, so a retry never
records a call twice. Idle connections are dropped by the proxy after
``KEEPALIVE_S``, before common servers drop them (uvicorn, vLLM: 5 s), which makes
that race rare. A reply that does not come within ``timeout_s`` is not retried
(the service may still be generating) and fails with 504. Every failure is a
``ServiceError`` naming the URL.
"""

from __future__ import annotations

from typing import Any

import httpx

from nexrl.core.chat.balance import RoundRobin, normalize_base_urls
from nexrl.rollout.agent_service.errors import ServiceError

__all__ = ["Upstream", "UpstreamReply"]

MAX_RETRIES_LIMIT = 10
KEEPALIVE_S = 2.0  # idle connections closed before the server's keep-alive timeout
# the connection closed before a reply: nothing generated for this caller, nothing recorded
_RETRIED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.RemoteProtocolError)


class UpstreamReply:
    """Status, JSON body (or None when not JSON) and headers of one upstream reply."""

    def __init__(self, status: int, body: Any, headers: httpx.Headers, url: str) -> None:
        self.status, self.body, self.headers, self.url = status, body, headers, url


class Upstream:
    """The inference service behind the proxy (one or more OpenAI-compatible replicas)."""

    def __init__(
        self,
        base_urls: str | list[str],
        *,
        timeout_s: float = 300.0,
        max_retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: the inference service's bearer token (None: send none; the
        agent's own key, its session id, is never forwarded)."""
        if not timeout_s > 0:
            raise ValueError(f"upstream timeout_s must be > 0, got {timeout_s}")
        if not 0 <= max_retries <= MAX_RETRIES_LIMIT:
            raise ValueError(f"upstream max_retries must be in [0, {MAX_RETRIES_LIMIT}]")
        self.urls = normalize_base_urls(base_urls)
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self._replicas = RoundRobin(self.urls)
        # connect: a dead host fails fast; read: a generation may take long, up to timeout_s.
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(
                max_connections=256, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_S
            ),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        )

    async def request(
        self, method: str, path: str, json: dict[str, Any] | None = None
    ) -> UpstreamReply:
        """``method path`` on the next replica; connection failures retried on the next ones."""
        tried: list[str] = []
        last = ""
        for _ in range(self.max_retries + 1):
            base = self._replicas.next()
            tried.append(base)
            try:
                resp = await self._http.request(method, f"{base}{path}", json=json)
            except _RETRIED as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            except httpx.TimeoutException:
                raise ServiceError(
                    504,
                    f"inference service {base} did not answer {path} within "
                    f"{self.timeout_s:g}s (agent service --upstream-timeout)",
                    code="upstream_timeout",
                ) from None
            except httpx.HTTPError as exc:
                raise ServiceError(
                    502,
                    f"inference service {base} failed on {path}: {type(exc).__name__}: {exc}",
                    code="upstream_error",
                ) from None
            try:
                body = resp.json()
            except ValueError:
                body = None
            return UpstreamReply(resp.status_code, body, resp.headers, base)
        raise ServiceError(
            502,
            f"cannot reach the inference service ({len(tried)} attempt(s): "
            f"{', '.join(dict.fromkeys(tried))}): {last}; is it running (agent service "
            "--upstream)?",
            code="upstream_unreachable",
        )

    async def aclose(self) -> None:
        await self._http.aclose()
