"""A real embedded inference server (tiny models) and the real agent service on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.agent_service import ServiceConfig, SessionLimits
from nexrl.agent_service.server import AgentService
from nexrl.modeling import save_tiny_model
from tests.integration.inference._helpers import start_server
from tests.integration.inference._known_model import save_bigram_model

BIGRAM_REPLY = "The answer is 9"  # what the bigram model says after every generation prompt


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A tiny model with random weights: replies are random text."""
    with start_server(save_tiny_model(tmp_path_factory.mktemp("m") / "tiny", seed=1)) as srv:
        yield srv


@pytest.fixture(scope="module")
def bigram_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A model that answers every turn with ``BIGRAM_REPLY``."""
    with start_server(
        save_bigram_model(tmp_path_factory.mktemp("m") / "bigram", BIGRAM_REPLY)
    ) as srv:
        yield srv


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
