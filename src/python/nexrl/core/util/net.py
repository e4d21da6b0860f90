"""Network helpers."""

from __future__ import annotations

import ipaddress
import socket

__all__ = [
    "SERVER_KEEP_ALIVE_S",
    "free_port",
    "interface_of",
    "is_loopback",
    "local_addresses",
    "worker_host",
]

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


def is_loopback(host: str) -> bool:
    """True for a loopback address (``127.x``, ``::1``); a name is not resolved."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def local_addresses() -> dict[str, str]:
    """``{address: interface}`` of every IPv4/IPv6 address this machine (its network
    namespace) holds."""
    import psutil

    found: dict[str, str] = {}
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                found.setdefault(a.address.split("%")[0], name)
    return found


def interface_of(host: str) -> str | None:
    """The network interface that holds address ``host`` here (None: none does)."""
    return local_addresses().get(host)


def worker_host() -> str | None:
    """The host part of this Dask worker's address: the address its peers reach it on
    (the IP facing the scheduler). None outside a worker."""
    from urllib.parse import urlparse

    from distributed import get_worker

    try:
        address = str(get_worker().address)
    except ValueError:  # not running on a worker
        return None
    return urlparse(address).hostname
