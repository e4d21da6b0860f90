"""Trajectory pool benchmarks (pytest-benchmark).

* ``pool-append-<procs>x<block>``: append throughput with 1 and 4 concurrent writer
  processes, the zarr pool next to the same arrays written as plain ``.npy`` files,
  in the same run. Only the writing is timed (processes are started and their data
  generated in the untimed setup). extra_info: traj/s, MB/s (raw payload), and for
  the pool ``vs_npy`` (its traj/s over the npy test's) and ``vs_npy_paired`` (median
  of per-round ratios, each pool round right after an npy round on the same data:
  robust to load changes on a shared machine).
* ``pool-fetch``: time of one ``get_batch`` (256 trajectories in groups of 8) when
  the pool holds 1k, 100k and (with NEXRL_BENCH_LARGE=1) 1M trajectories, plus the
  first batch of a fresh consumer and the resident memory (extra_info).
* ``pool-chunking`` (NEXRL_BENCH_CHUNKING=1): the measurements behind the default
  chunk sizes and codec (docs/pool.md).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from tests.benchmarks._pool_bench import appender, build_pool

TOKENS = (64, 512)  # response length range; prompts are 1/4 of that
LARGE = os.environ.get("NEXRL_BENCH_LARGE") == "1"
CHUNKING = os.environ.get("NEXRL_BENCH_CHUNKING") == "1"
# Rounds per append benchmark: 3 in CI (its time), 5 with NEXRL_BENCH_LARGE=1 (the table).
APPEND_ROUNDS = 5 if LARGE else 3
_baseline: dict[tuple[int, int], float] = {}


class Appenders:
    """``procs`` writer processes that generate their data, then write on a signal."""

    def __init__(
        self,
        kind: str,
        root: Path,
        procs: int,
        n_blocks: int,
        block: int,
        chunking: dict | None = None,
        tokens: tuple[int, int] = TOKENS,
    ) -> None:
        self.kind, self.root, self.procs = kind, root, procs
        self.n_blocks, self.block, self.chunking = n_blocks, block, chunking
        self.tokens = tokens
        self.ctx = mp.get_context("spawn")
        self.round = 0
        self.results: list[tuple[float, int, int]] = []
        self.run_s: list[float] = []

    def setup(self) -> None:
        self.close()  # the previous round's processes exit outside the timed part
        self.round += 1
        target = self.root / f"{self.kind}-{self.round}"
        shutil.rmtree(self.root, ignore_errors=True)  # keep disk use flat across rounds
        ready, self.done, self.go = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Event()
        store = str(target / "pool.zarr") if self.kind == "pool" else str(target)
        self.workers = [
            self.ctx.Process(
                target=appender,
                args=(
                    self.kind,
                    store,
                    p,
                    self.n_blocks,
                    self.block,
                    self.tokens,
                    ready,
                    self.go,
                    self.done,
                    self.chunking,
                ),
            )
            for p in range(self.procs)
        ]
        for w in self.workers:
            w.start()
        for _ in self.workers:
            ready.get(timeout=300)

    def run(self) -> None:
        t0 = time.perf_counter()
        self.go.set()
        self.results = [self.done.get(timeout=300) for _ in self.workers]
        self.run_s.append(time.perf_counter() - t0)

    def close(self) -> None:
        for w in getattr(self, "workers", []):
            w.join(60)
        self.workers = []

    @property
    def traj(self) -> int:
        return sum(r[2] for r in self.results)

    @property
    def nbytes(self) -> int:
        return sum(r[1] for r in self.results)


class Paired:
    """Pool rounds, each preceded (untimed by pytest-benchmark) by an npy round on the
    same data: the ratio of paired times survives load changes on a shared machine."""

    def __init__(self, root: Path, procs: int, n_blocks: int, block: int) -> None:
        self.pool = Appenders("pool", root / "pool", procs, n_blocks, block)
        self.npy = Appenders("npy", root / "npy", procs, n_blocks, block)
        self.npy_s: list[float] = []
        self.pool_s: list[float] = []

    def setup(self) -> None:
        self.npy.setup()
        self.npy.run()
        self.npy_s.append(self.npy.run_s[-1])
        self.npy.close()
        self.pool.setup()

    def run(self) -> None:
        self.pool.run()
        self.pool_s.append(self.pool.run_s[-1])

    @property
    def ratio(self) -> float:
        """Median over rounds of npy time / pool time (> 1: the pool is faster)."""
        return float(statistics.median(n / p for n, p in zip(self.npy_s, self.pool_s, strict=True)))


@pytest.mark.parametrize("block", [8, 256], ids=lambda b: f"block{b}")
@pytest.mark.parametrize("procs", [1, 4], ids=lambda p: f"{p}proc")
@pytest.mark.parametrize("kind", ["npy", "pool"])
def test_append_throughput(
    benchmark: Any, tmp_path: Path, kind: str, procs: int, block: int
) -> None:
    n_blocks = 64 if block == 8 else 8  # 512 / 2048 trajectories per process
    benchmark.group = f"pool-append-{procs}x{block}"
    if kind == "npy":
        app = Appenders(kind, tmp_path / "data", procs, n_blocks, block)
        benchmark.pedantic(app.run, setup=app.setup, rounds=APPEND_ROUNDS, iterations=1)
        app.close()
    else:
        paired = Paired(tmp_path / "data", procs, n_blocks, block)
        benchmark.pedantic(paired.run, setup=paired.setup, rounds=APPEND_ROUNDS, iterations=1)
        paired.pool.close()
        app = paired.pool
        benchmark.extra_info["vs_npy_paired"] = round(paired.ratio, 3)
    seconds = statistics.mean(app.run_s)  # == the benchmark's mean (also with --benchmark-disable)
    tps, mbs = app.traj / seconds, app.nbytes / seconds / 1e6
    benchmark.extra_info.update(
        traj_per_s=round(tps),
        mb_per_s=round(mbs, 1),
        trajectories=app.traj,
        raw_mb=round(app.nbytes / 1e6, 1),
    )
    if kind == "npy":
        _baseline[(procs, block)] = tps
    elif (procs, block) in _baseline:
        benchmark.extra_info["vs_npy"] = round(tps / _baseline[(procs, block)], 3)


# (pool size, trajectories per append): bulk appends, and appends of one group of 8 as
# rollout tasks make them (100k of those take ~1 min to build: NEXRL_BENCH_LARGE=1)
FETCH_CASES = [(1_000, 50_000), (100_000, 50_000), (1_000_000, 50_000), (1_000, 8)] + (
    [(100_000, 8)] if LARGE else []
)
FETCH_TOKENS = (16, 48)  # short trajectories: this measures the index, not the bandwidth


@pytest.fixture(scope="module")
def pool_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``build(size, block) -> (store, build seconds)``, each pool built once per module."""
    root = tmp_path_factory.mktemp("fetch")
    built: dict[tuple[int, int], tuple[str, float]] = {}

    def build(size: int, block: int) -> tuple[str, float]:
        if (size, block) not in built:
            store = str(root / f"pool-{size}-{block}.zarr")
            t0 = time.perf_counter()
            # built in another process so that this one holds only the consumer
            p = mp.get_context("spawn").Process(
                target=build_pool, args=(store, size, min(size, block), FETCH_TOKENS)
            )
            p.start()
            p.join()
            assert p.exitcode == 0
            built[(size, block)] = (store, time.perf_counter() - t0)
        return built[(size, block)]

    yield build
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("size", "block"), FETCH_CASES, ids=lambda v: f"{v // 1000}k" if v >= 1000 else f"per{v}"
)
def test_fetch_batch(benchmark: Any, pool_store: Any, size: int, block: int) -> None:
    store, build_s = pool_store(size, block)
    proc = psutil.Process()
    cfg = PoolConfig(store=store, batch_size=256, group_size=8, key_list=["group_id"])
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    first = TrajectoryPool(dataclasses.replace(cfg, consumer="cold")).get_batch()
    cold_s = time.perf_counter() - t0
    assert first is not None and len(first) == 256
    pool = TrajectoryPool(cfg)
    pool.get_batch()  # warm: segment opened
    state = pool.state_dict()

    def fetch() -> None:
        batch = pool.get_batch()
        assert batch is not None and len(batch) == 256

    def refill() -> None:  # untimed: rewind the consumer when fewer than 2 batches are left
        if pool.stats().pending < 2 * 256:
            pool.load_state_dict(state)

    benchmark.group = "pool-fetch" if block > 8 else "pool-fetch-small-commits"
    benchmark.pedantic(fetch, setup=refill, rounds=20, iterations=1)
    benchmark.extra_info.update(
        pool_trajectories=size,
        trajectories_per_commit=min(size, block),
        build_s=round(build_s, 1),
        first_batch_fresh_consumer_ms=round(cold_s * 1e3, 1),
        rss_mb=round(proc.memory_info().rss / 2**20, 1),
        rss_growth_mb=round((proc.memory_info().rss - rss0) / 2**20, 1),
    )


# -- chunking measurements (docs/pool.md) ----------------------------------------------
CHUNK_TOKENS = (512, 2048)  # realistic response lengths for the chunking comparison
CHUNKINGS: dict[str, dict[str, Any]] = {
    "rows256-tok8k-lz4": {"token_chunk": 8192},
    "rows256-tok16k-lz4": {"token_chunk": 16384},
    "rows256-tok32k-lz4-default": {},
    "rows256-tok64k-lz4": {"token_chunk": 65536},
    "rows256-tok256k-lz4": {"token_chunk": 262144},
    "rows1024-tok32k-lz4": {"row_chunk": 1024},
    "rows4096-tok32k-lz4": {"row_chunk": 4096},
    "rows256-tok32k-zstd1": {"codec": "zstd", "clevel": 1},
    "rows256-tok32k-none": {"codec": "none"},
}


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


@pytest.mark.skipif(not CHUNKING, reason="set NEXRL_BENCH_CHUNKING=1")
@pytest.mark.parametrize("block", [8, 512], ids=lambda b: f"block{b}")
@pytest.mark.parametrize("name", list(CHUNKINGS))
def test_chunking(benchmark: Any, tmp_path: Path, name: str, block: int) -> None:
    chunking = CHUNKINGS[name]
    app = Appenders("pool", tmp_path / "data", 1, 2048 // block, block, chunking, CHUNK_TOKENS)
    app.setup()
    app.run()
    app.close()
    append_s = app.results[0][0]
    store = tmp_path / "data" / f"pool-{app.round}" / "pool.zarr"
    cfg = PoolConfig(
        store=str(store), batch_size=256, group_size=8, key_list=["group_id"], chunking=chunking
    )
    pool = TrajectoryPool(cfg)

    def fetch() -> None:
        assert pool.get_batch() is not None

    benchmark.group = f"pool-chunking-block{block}"
    benchmark.pedantic(fetch, rounds=6, iterations=1)
    benchmark.extra_info.update(
        append_mb_per_s=round(app.nbytes / append_s / 1e6, 1),
        append_ms_per_block=round(append_s / (2048 // block) * 1e3, 2),
        disk_mb=round(_disk_mb(store), 1),
        raw_mb=round(app.nbytes / 1e6, 1),
    )
