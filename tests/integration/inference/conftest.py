"""Shared fixtures: tiny model snapshots and a real embedded server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.modeling import save_tiny_model
from tests.integration.inference._helpers import start_server


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny models with different seeded weights (same architecture)."""
    root = tmp_path_factory.mktemp("snapshots")
    return {"a": save_tiny_model(root / "a", seed=1), "b": save_tiny_model(root / "b", seed=2)}


@pytest.fixture(scope="module")
def server(snapshots: dict[str, Path]) -> Iterator[EmbeddedServer]:
    """A server on snapshot ``a`` for one test module; stopped cleanly afterwards."""
    srv = start_server(snapshots["a"])
    try:
        yield srv
    finally:
        srv.stop()
        proc = srv.process
        assert proc is not None and proc.poll() is not None, "server process left running"
