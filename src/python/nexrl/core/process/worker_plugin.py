"""Import a recipe's plugins in every Dask worker process, present and future.

``install_plugins(client, resolved)`` registers ``ImportPlugins``, a Dask
``WorkerPlugin`` carrying the resolved plugin files and module names
(``nexrl.core.plugins.resolve_plugins``): each worker running now imports them at
once, and each worker that joins later (a scaled-up or restarted one) imports
them before it runs its first task. Register it right after the client
connects, before any task or actor is created. Files must be readable at the
same absolute path on every worker (a shared filesystem on a real cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from nexrl.core.config.errors import RecipeError
from nexrl.core.plugins import import_plugins

__all__ = ["ImportPlugins", "install_plugins"]


class ImportPlugins(WorkerPlugin):
    """Imports ``resolved`` (absolute file paths, module names) in a worker's process."""

    name = "nexrl-plugins"

    def __init__(self, resolved: Sequence[str]) -> None:
        self.resolved = tuple(resolved)

    def setup(self, worker: Any) -> None:
        try:
            import_plugins(self.resolved)
        except RecipeError as exc:
            where = f" (on Dask worker {worker.address})"
            raise RecipeError([p + where for p in exc.problems]) from None


def install_plugins(client: Any, resolved: Sequence[str]) -> None:
    """Have every worker of ``client``'s cluster, now and later, import ``resolved``.

    A worker running now that cannot import one raises the ``RecipeError``
    naming ``plugins[i]``, the file and the worker. Nothing to do without plugins.
    """
    if resolved:
        client.register_plugin(ImportPlugins(resolved))
