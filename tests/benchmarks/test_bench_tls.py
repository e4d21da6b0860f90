"""Dask comms on TLS (``cluster.tls.temporary``) vs plain TCP, on the same LocalCluster
settings (2 worker processes, 127.0.0.1), as started by ``start_cluster``.

Two loads, each under its own benchmark group, TLS beside its TCP baseline:
* ``tls-tasks``: 200 tiny tasks submitted and gathered (the rollout futures' pattern:
  many small messages between client, scheduler and workers);
* ``tls-transfer``: a 32 MB array produced on one worker and copied to the other
  (a large payload: encryption cost per byte).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nexrl.core.config.sections.cluster import ClusterConfig, TlsConfig
from nexrl.core.util.dask_workers import workers_of
from nexrl.driver.cluster.cluster import ClusterHandle, start_cluster

N_TASKS = 200
MB = 32


@pytest.fixture(scope="module", params=["tcp", "tls"])
def handle(request: Any) -> Iterator[ClusterHandle]:
    tls = TlsConfig(temporary=request.param == "tls")
    h = start_cluster(ClusterConfig(n_workers=2, dashboard_address="127.0.0.1:0", tls=tls), "bench")
    assert h.scheduler_address.startswith(f"{request.param}://")
    try:
        yield h
    finally:
        h.close()


def _inc(x: int) -> int:
    return x + 1


def _tasks(h: ClusterHandle) -> list[int]:
    futs = h.client.map(_inc, range(N_TASKS), pure=False)
    return list(h.client.gather(futs))


def _make(n: int) -> np.ndarray:
    return np.ones(n // 8, dtype=np.float64)


def _total(a: np.ndarray) -> float:
    return float(a.sum())


def _transfer(h: ClusterHandle) -> float:
    first, second = sorted(workers_of(h.client))
    made = h.client.submit(_make, MB * 2**20, workers=[first], pure=False)
    return float(h.client.submit(_total, made, workers=[second], pure=False).result())


@pytest.mark.benchmark(group="tls-tasks")
def test_small_tasks(benchmark: Any, handle: ClusterHandle) -> None:
    out = benchmark.pedantic(_tasks, args=(handle,), rounds=5, warmup_rounds=1)
    assert out == list(range(1, N_TASKS + 1))


@pytest.mark.benchmark(group="tls-transfer")
def test_worker_to_worker_transfer(benchmark: Any, handle: ClusterHandle) -> None:
    out = benchmark.pedantic(_transfer, args=(handle,), rounds=5, warmup_rounds=1)
    assert out == MB * 2**20 / 8
