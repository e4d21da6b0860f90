"""The training service as a Dask actor: ``start_service_on_cluster(client, spec)``.

The actor builds the trainer and serves the API on its worker (binding the
worker's host: ``127.0.0.1`` on a ``LocalCluster``); the helper returns a
``ServiceHandle`` with the URL and ``close()``. Placement follows the trainer
actors': a worker offering the ``GPU`` resource, pinned (``workers=[addr]``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from nexrl.trainer.spec import TrainerSpec

__all__ = ["ServiceActor", "ServiceHandle", "start_service_on_cluster"]


class ServiceActor:
    """Hosts a ``TrainingService`` on a Dask worker."""

    def __init__(self, spec: TrainerSpec, host: str, token: str | None) -> None:
        self.spec, self.host, self.token = spec, host, token
        self.service: Any = None

    def start(self) -> str:
        from nexrl.trainer.service.server import TrainingService

        self.service = TrainingService(self.spec, host=self.host, token=self.token).start()
        return str(self.service.base_url)

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()
            self.service = None


@dataclass
class ServiceHandle:
    """A training service running as a Dask actor."""

    url: str
    worker: str
    future: Any
    actor: Any
    client: Any

    def close(self, timeout_s: float = 60.0) -> None:
        try:
            self.actor.stop().result(timeout=timeout_s)
        finally:
            self.client.cancel([self.future])


def start_service_on_cluster(
    client: Any,
    spec: TrainerSpec,
    *,
    worker: str | None = None,
    gpus: float = 1,
    token: str | None = None,
    timeout_s: float = 900.0,
) -> ServiceHandle:
    """Start the service on a worker offering ``GPU >= gpus`` (or on ``worker``); its URL."""
    from nexrl.trainer.actor import pick_workers

    addr = worker or pick_workers(client, 1, gpus)[0]
    host = urlparse(addr).hostname or "127.0.0.1"
    future = client.submit(
        ServiceActor,
        spec,
        host,
        token,
        actor=True,
        workers=[addr],
        allow_other_workers=False,
        resources={"GPU": gpus} if gpus else None,
        key=f"nexrl-training-service-{uuid.uuid4().hex[:8]}",
    )
    actor = future.result(timeout=timeout_s)
    try:
        url = actor.start().result(timeout=timeout_s)
    except BaseException:
        client.cancel([future])
        raise
    return ServiceHandle(url=str(url), worker=addr, future=future, actor=actor, client=client)
