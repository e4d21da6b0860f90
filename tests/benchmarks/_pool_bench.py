"""Process bodies for tests/benchmarks/test_bench_pool.py (spawned, so kept importable)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from nexrl.core.pool import Chunking, PoolWriter, TrajectoryColumns
from tests.unit.pool._data import random_columns


def make_blocks(
    seed: int, n_blocks: int, block: int, tokens: tuple[int, int]
) -> list[TrajectoryColumns]:
    rng = np.random.default_rng(seed)
    return [
        random_columns(block, rng, tokens, first_group=seed * 10**6 + k * block)
        for k in range(n_blocks)
    ]


def write_npy(directory: Path, blocks: list[TrajectoryColumns]) -> None:
    """Baseline: every array of every block as its own .npy file."""
    directory.mkdir(parents=True, exist_ok=True)
    for k, cols in enumerate(blocks):
        for name in TrajectoryColumns.__dataclass_fields__:
            if name != "metrics":
                np.save(directory / f"{k:06d}_{name}.npy", getattr(cols, name))


def appender(
    kind: str,
    target: str,
    seed: int,
    n_blocks: int,
    block: int,
    tokens: tuple[int, int],
    ready: Any,
    go: Any,
    done: Any,
    chunking: dict | None = None,
) -> None:
    """Generate the data, report ready, wait for ``go``, write, report (elapsed, bytes)."""
    blocks = make_blocks(seed, n_blocks, block, tokens)
    writer = PoolWriter(target, chunking=Chunking(**(chunking or {}))) if kind == "pool" else None
    if writer is not None:
        writer.open()  # one-time segment creation is not part of the append throughput
    else:
        (Path(target) / f"w{seed}").mkdir(parents=True, exist_ok=True)
    nbytes = sum(b.nbytes for b in blocks)
    ready.put(seed)
    go.wait()
    t0 = time.perf_counter()
    if writer is not None:
        for b in blocks:
            writer.append(b)
    else:
        write_npy(Path(target) / f"w{seed}", blocks)
    done.put((time.perf_counter() - t0, nbytes, n_blocks * block))


def build_pool(store: str, total: int, block: int, tokens: tuple[int, int], seed: int = 0) -> None:
    """Bulk-write ``total`` trajectories (groups of 8) through the writer API."""
    w = PoolWriter(store)
    rng = np.random.default_rng(seed)
    for start in range(0, total, block):
        n = min(block, total - start)
        w.append(random_columns(n, rng, tokens, first_group=start // 8))
