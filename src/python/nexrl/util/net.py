"""Network helpers."""

from __future__ import annotations

import socket

__all__ = ["SERVER_KEEP_ALIVE_S", "free_port"]

# How long nexrl's HTTP servers (embedded inference, agent and training services) keep
# an idle connection open. Longer than clients keep one (httpx and the openai client:
# 5 s), so a client never reuses a connection the server has just closed: with
# uvicorn's 5 s on both sides, ~1 call in 2,400 failed with a ReadError under load
# (tests/benchmarks/test_bench_agent_service.py, under load). nginx's default is 75 s too.
SERVER_KEEP_ALIVE_S = 75


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (``""``: on every interface).

    The port is only probed, not held: another process may take it before the
    caller binds it, so use it at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
