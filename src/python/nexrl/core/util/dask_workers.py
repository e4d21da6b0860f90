"""The workers a Dask scheduler has now, asked for directly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SilenceClock", "offers", "workers_of"]


def workers_of(client: Any) -> dict[str, dict[str, Any]]:
    """``{address: info}`` of every worker of ``client``'s scheduler, fetched now.

    Not ``Client.scheduler_info(n_workers=-1)["workers"]``: that returns the client's
    cached identity, which the client's periodic refresh (asking for no workers) may
    overwrite between the fresh fetch and the return; its ``workers`` was seen empty
    with both workers of a LocalCluster up (a benchmark of the full suite)."""
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(info.get("workers") or {})


def offers(resources: Mapping[str, float] | None, need: Mapping[str, float] | None) -> bool:
    """Whether a worker offering ``resources`` (its Dask ``resources``) has room for a
    task asking ``need``; any worker when ``need`` is None or empty."""
    have = resources or {}
    return all(have.get(k, 0) >= v for k, v in (need or {}).items())


class SilenceClock:
    """Seconds since each worker's heartbeat (the scheduler's ``last_seen``) last
    moved, on this process's clock: it holds when the scheduler runs on another
    machine. Counted from the first time a worker is observed."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, float]] = {}  # addr -> (last_seen, when it moved)

    def observe(self, workers: dict[str, dict[str, Any]], now: float) -> dict[str, float]:
        """``{address: seconds silent}`` of every worker in ``workers`` (a ``workers_of``
        answer taken at ``now``); a worker no longer listed is forgotten."""
        for addr in [a for a in self._seen if a not in workers]:
            del self._seen[addr]
        quiet = {}
        for addr, info in workers.items():
            seen = info.get("last_seen")
            before = self._seen.get(addr)
            if before is None or before[0] != seen:
                self._seen[addr] = before = (seen, now)
            quiet[addr] = now - before[1]
        return quiet

    def forget(self, addr: str) -> None:
        self._seen.pop(addr, None)
