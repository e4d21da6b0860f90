"""The real agent service on 127.0.0.1 (the servers behind it: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nexrl.rollout.agent_service import ServiceConfig, SessionLimits
from nexrl.rollout.agent_service.server import AgentService

ServiceFactory = Callable[..., AgentService]


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[ServiceFactory]:
    """Start agent services (stopped after the test); the pool is ``tmp_path/pool.zarr``."""
    started: list[AgentService] = []

    def make(upstream: str, limits: SessionLimits | None = None, **kw: Any) -> AgentService:
        config = ServiceConfig(
            upstream=upstream,
            pool=str(tmp_path / "pool.zarr"),
            limits=limits or SessionLimits(),
            **kw,
        )
        service = AgentService(config).start()
        started.append(service)
        return service

    yield make
    for s in started:
        s.stop()
