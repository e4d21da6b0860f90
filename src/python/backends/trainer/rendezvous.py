"""The trainer ranks' rendezvous store, listening only on the address the ranks use.

``torch.distributed``'s ``env://`` rendezvous starts rank 0's ``TCPStore`` server on
every interface (``*:MASTER_PORT``), and the store has no authentication: anyone who
reaches the port can read and write the group's keys. Here rank 0 binds the socket
itself on ``MASTER_ADDR`` (``127.0.0.1`` in a local run; the rank-0 worker's own
address on a cluster, the one the other ranks connect to) and hands it to the store
(``master_listen_fd``); the other ranks connect as before. The process group is
then formed on that store (``init_process_group(store=...)``), and DeepSpeed's
``init_distributed`` finds it formed.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

__all__ = ["SOCKETS", "close_sockets", "join_process_group", "listening_socket"]

SOCKETS: list[socket.socket] = []  # rank 0's listening sockets of this process's group


def close_sockets() -> None:
    """Close the rendezvous sockets (after the process group is destroyed)."""
    for sock in SOCKETS:
        sock.close()
    SOCKETS.clear()


def listening_socket(addr: str, port: int) -> socket.socket:
    """A TCP socket bound to ``addr:port`` and listening (IPv6 when ``addr`` is one)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def join_process_group(
    backend: str, rank: int, world: int, addr: str, port: int, timeout_s: float
) -> Any:
    """Form (rank 0) or join the process group through a store on ``addr:port`` only;
    returns the store. Rank 0's listening socket stays open in ``SOCKETS`` until
    ``close_sockets``."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if rank == 0:
        sock = listening_socket(addr, port)
        store = dist.TCPStore(
            addr,
            port,
            world,
            True,
            timeout,
            wait_for_workers=False,
            master_listen_fd=sock.fileno(),
            use_libuv=True,
        )
        SOCKETS.append(sock)  # closed when the group is destroyed (close_sockets)
    else:
        store = dist.TCPStore(addr, port, world, False, timeout, use_libuv=True)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return store
