"""A real local HTTP server that records requests: the stand-in for an engine
(vLLM, SGLang) that cannot run on this machine, and for misbehaving servers.

Routes map ``(method, path)`` to a reply: ``(status, json_body)``,
``(status, raw_bytes)`` or a callable taking the recorded request. Anything
unrouted answers 404. ``hang_s`` makes every reply wait first (a hung server).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


Reply = tuple[int, Any] | Callable[[Recorded], tuple[int, Any]]


@dataclass
class StandinEngine:
    routes: dict[tuple[str, str], Reply] = field(default_factory=dict)
    hang_s: float = 0.0
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                rec = Recorded(
                    self.command, parts.path, parse_qs(parts.query), dict(self.headers), body
                )
                engine.requests.append(rec)
                if engine.hang_s:
                    time.sleep(engine.hang_s)
                reply = engine.routes.get((self.command, parts.path), (404, {"error": "no route"}))
                status, payload = reply(rec) if callable(reply) else reply
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            do_GET = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def paths(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests]

    def __enter__(self) -> StandinEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
