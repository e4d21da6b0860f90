"""Who may talk to the servers nexrl starts: loopback by default, a bearer token beyond.

Every server nexrl starts (the embedded inference server, the agent service)
binds ``127.0.0.1`` unless told otherwise. Binding any other address (``0.0.0.0``,
a node's address) needs a shared bearer token: a server asked to bind beyond
loopback without one refuses to start (``bind_refusal``). With a token set,
every request (``/health`` included) must carry ``Authorization: Bearer
<token>``, or it gets 401 (``BearerAuth``).

The token is ``service.inference_service.api_key`` (the key the OpenAI clients
already send); ``"EMPTY"`` (the default, vLLM's "no key") or ``""`` means none.
A server started as a child process reads it from the environment
(``INFERENCE_TOKEN_ENV``, ``AGENT_SERVICE_TOKEN_ENV``), never from its command
line (which any user of the machine can read with ``ps``).

Importing this module is cheap (no web framework).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "AGENT_SERVICE_TOKEN_ENV",
    "INFERENCE_TOKEN_ENV",
    "NO_KEY",
    "BearerAuth",
    "bearer_key",
    "bind_refusal",
    "is_loopback",
    "same_token",
    "token_of",
]

INFERENCE_TOKEN_ENV = "NEXRL_INFERENCE_TOKEN"
AGENT_SERVICE_TOKEN_ENV = "NEXRL_AGENT_SERVICE_TOKEN"
NO_KEY = ("", "EMPTY")  # api_key values that mean "no token"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def token_of(api_key: str | None) -> str | None:
    """The bearer token an ``api_key`` setting stands for (None: no token)."""
    if api_key is None:
        return None
    key = str(api_key).strip()
    return None if key in NO_KEY else key


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server reachable from this machine only
    (``127.0.0.1``, ``::1``, ``localhost``; a name counts if all its addresses do)."""
    host = host.strip().strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addrs = {str(info[4][0]) for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def bind_refusal(host: str, token: str | None, *, what: str, field: str) -> str | None:
    """The one-line reason ``what`` must not bind ``host`` (None: it may): beyond
    loopback a token is required, and ``field`` is where to set it."""
    if token or is_loopback(host):
        return None
    return (
        f"{what} refuses to bind {host!r} (reachable beyond this machine) without a bearer "
        f"token: set {field} (e.g. from the environment with ${{oc.env:MY_TOKEN}}) or bind "
        "127.0.0.1"
    )


def same_token(given: str, token: str) -> bool:
    """Constant-time comparison (no timing hint about how much of a guess was right)."""
    return hmac.compare_digest(given.encode(), token.encode())


def bearer_key(headers: MutableMapping[str, str] | Any) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, if any."""
    auth = headers.get("authorization") or ""
    scheme, _, key = str(auth).partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return key.strip()


class BearerAuth:
    """ASGI middleware: HTTP requests for which ``allowed(headers)`` is false get 401
    (OpenAI's error shape, ``code: invalid_api_key``, ``WWW-Authenticate: Bearer``)."""

    def __init__(self, app: ASGIApp, allowed: Callable[[Any], bool], hint: str) -> None:
        self.app, self.allowed, self.hint = app, allowed, hint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        if self.allowed(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "message": f"missing or wrong bearer token: {self.hint}",
                    "type": "authentication_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
