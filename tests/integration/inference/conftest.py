"""Two tiny snapshots, and a server on the first (fixtures of tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from backends.inference.embedded import EmbeddedServer


@pytest.fixture(scope="module")
def snapshots(tiny_model: Callable[..., Path]) -> dict[str, Path]:
    """Two tiny models with different seeded weights (same architecture)."""
    return {"a": tiny_model(seed=1), "b": tiny_model(seed=2)}


@pytest.fixture(scope="module")
def server(
    start_embedded_server: Callable[..., EmbeddedServer], snapshots: dict[str, Path]
) -> EmbeddedServer:
    """A server on snapshot ``a`` for one test module; stopped (and checked) afterwards."""
    return start_embedded_server(snapshots["a"])
