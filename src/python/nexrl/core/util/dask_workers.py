"""The workers a Dask scheduler has now, asked for directly."""

from __future__ import annotations

from typing import Any

__all__ = ["workers_of"]


def workers_of(client: Any) -> dict[str, dict[str, Any]]:
    """``{address: info}`` of every worker of ``client``'s scheduler, fetched now.

    Not ``Client.scheduler_info(n_workers=-1)["workers"]``: that returns the client's
    cached identity, which the client's periodic refresh (asking for no workers) may
    overwrite between the fresh fetch and the return; its ``workers`` was seen empty
    with both workers of a LocalCluster up (a benchmark of the full suite)."""
    info = client.sync(client.scheduler.identity, n_workers=-1)
    return dict(info.get("workers") or {})
