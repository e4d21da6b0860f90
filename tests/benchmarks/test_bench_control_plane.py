"""The control plane's limits: groups/s and the driver's CPU per group as rollout
workers and groups in flight grow, against a stand-in engine that answers at once.

What runs (``tests/_control_plane.py``): the controller's loop with the trainer's step
left out (harvest, top-up, the pool's batches, each batch written to its step file),
rollout + evaluator futures on a ``LocalCluster`` of N worker processes made as
``nexrl train`` makes it, the default recipe's data and evaluator, a zarr pool; the
engine is the stand-in (``tests/_standin_engine.py``: a real HTTP server with no
model, one-token answers, 0 ms latency unless a test says otherwise), reached as a
``base_urls`` replica (one request with ``n=8`` per group). The point: the engine
costs next to nothing, so what saturates is the plane itself.

Each point measures ``measured_groups`` groups after a warm-up and records, in
``extra_info`` and one printed table row: groups/s, the driver process's CPU ms per
group (its main thread, the controller loop, apart from the rest: the Dask
scheduler and the client's comms, which share the driver process as in ``nexrl
train``), its share of one core, the workers' and the engine's CPU per group, the
mean compute of a rollout and an evaluate task (scoring plus the pool commit), and
the load average. The baseline in the same run: the same requests sent from one
process (``InferenceClient`` + ``asyncio.gather``), nothing else. Numbers and what
saturates: docs/benchmarks.md, "The control plane's limits".

Long (~7-11 min on the 2-core machine, a third of it starting 31 worker processes): runs
only with ``NEXRL_BENCH_SCALE=1``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests._control_plane import (
    PlaneRun,
    PlaneSettings,
    drive_plane,
    plane_cluster,
    plane_pool,
    plane_spec,
)
from tests._standin_engine import Latency, StandinSettings, start_standin_engine

pytestmark = pytest.mark.skipif(
    os.environ.get("NEXRL_BENCH_SCALE") != "1",
    reason="a long benchmark (~7-11 min on 2 cores): set NEXRL_BENCH_SCALE=1 to run it",
)

NAME = "standin"
WORKERS = [1, 2, 4, 8, 16]
# (groups in flight, groups per task): the default recipe's 8 groups a task with 2, 8
# and 32 tasks in flight, and a task per group (the config default) with 64 tasks.
POINTS = [(16, 8), (64, 8), (256, 8), (64, 1)]


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    server = start_standin_engine(StandinSettings(NAME))
    yield server
    server.stop()


@pytest.fixture(scope="module", params=WORKERS, ids=[f"{n}w" for n in WORKERS])
def cluster(request: pytest.FixtureRequest) -> Iterator[tuple[int, Any]]:
    with plane_cluster(int(request.param)) as client:
        yield int(request.param), client


def _report(benchmark: Any, label: str, run: PlaneRun) -> None:
    row = run.row()
    benchmark.extra_info.update(row)
    benchmark.extra_info["settings"] = label
    assert run.failed_groups == 0
    ids = run.group_ids
    assert len(ids) == len(set(ids)) == run.groups + run.settings.warmup_groups  # each once
    print(
        f"\n| {label} | {row['groups_per_s']:.0f} | {row['driver_cpu_ms_per_group']:.2f} "
        f"| {row['loop_cpu_ms_per_group']:.2f} | {row['scheduler_cpu_ms_per_group']:.2f} "
        f"| {row['driver_cpu_share']:.2f} | {row['workers_cpu_ms_per_group']:.1f} "
        f"| {row['engine_cpu_ms_per_group']:.2f} | {row.get('rollout_task_ms', 0):.0f} / "
        f"{row.get('evaluate_task_ms', 0):.0f} | {row['load_1m']:.1f} |"
    )


def _measure(
    benchmark: Any, client: Any, engine: Any, tmp_path: Path, s: PlaneSettings, tokens: int = 1
) -> PlaneRun:
    spec = plane_spec(engine.base_url, NAME, plane_pool(tmp_path / "pool.zarr", s), tokens)
    runs: list[PlaneRun] = []
    benchmark.pedantic(
        lambda: runs.append(drive_plane(client, spec, s, tmp_path, engine.pid)),
        rounds=1,
        iterations=1,
    )
    return runs[0]


@pytest.mark.benchmark(group="control-plane")
def test_direct_requests_baseline(benchmark: Any, engine: Any) -> None:
    """The same group requests (n=8, one token) from one process, 256 at once: what
    sending them costs without futures, pool or scheduler."""
    from nexrl.core.chat import InferenceClient

    groups = 512
    me = psutil.Process()
    eng = psutil.Process(engine.pid)

    async def go() -> None:
        async with InferenceClient(engine.base_url, NAME) as client:
            prompt = [{"role": "user", "content": "max 4 3 9"}]
            for _ in range(groups // 256):
                await asyncio.gather(*(client.chat(prompt, n=8, max_tokens=1) for _ in range(256)))

    asyncio.run(go())  # warm-up
    c0, e0, t0 = sum(me.cpu_times()[:2]), sum(eng.cpu_times()[:2]), time.perf_counter()
    benchmark.pedantic(lambda: asyncio.run(go()), rounds=1, iterations=1)
    c1, e1, t1 = sum(me.cpu_times()[:2]), sum(eng.cpu_times()[:2]), time.perf_counter()
    info = {
        "groups_per_s": groups / (t1 - t0),
        "client_cpu_ms_per_group": 1000 * (c1 - c0) / groups,
        "engine_cpu_ms_per_group": 1000 * (e1 - e0) / groups,
        "load_1m": os.getloadavg()[0],
    }
    benchmark.extra_info.update(info)
    print(
        f"\n| direct, 1 process | {info['groups_per_s']:.0f} | client "
        f"{info['client_cpu_ms_per_group']:.2f} | | | | | {info['engine_cpu_ms_per_group']:.2f} "
        f"| | {info['load_1m']:.1f} |"
    )


@pytest.mark.benchmark(group="control-plane")
def test_idle_cluster(benchmark: Any, cluster: tuple[int, Any]) -> None:
    """The driver's CPU with N workers and nothing to do (heartbeats, the scheduler's
    periodic work): the part of each row's CPU that comes per second, not per group."""
    workers, _ = cluster
    me = psutil.Process()
    seconds = 8.0
    c0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
    benchmark.pedantic(lambda: time.sleep(seconds), rounds=1, iterations=1)
    share = (sum(me.cpu_times()[:2]) - c0) / (time.perf_counter() - t0)
    load = os.getloadavg()[0]
    benchmark.extra_info.update({"idle_driver_cpu_share": share, "load_1m": load})
    print(f"\n| {workers} workers, idle | | | | | {share:.3f} | | | | {load:.1f} |")


@pytest.mark.benchmark(group="control-plane")
@pytest.mark.parametrize(
    ("in_flight", "groups_per_task"), POINTS, ids=[f"{a}g-{b}pt" for a, b in POINTS]
)
def test_plane_scale(
    benchmark: Any,
    cluster: tuple[int, Any],
    engine: Any,
    tmp_path: Path,
    in_flight: int,
    groups_per_task: int,
) -> None:
    workers, client = cluster
    s = PlaneSettings(in_flight=in_flight, groups_per_task=groups_per_task)
    run = _measure(benchmark, client, engine, tmp_path, s)
    _report(benchmark, f"{workers} workers, {in_flight} in flight, {groups_per_task}/task", run)


@pytest.mark.benchmark(group="control-plane")
@pytest.mark.parametrize("cluster", [4], indirect=True, ids=["4w"])
def test_plane_with_engine_latency(
    benchmark: Any, cluster: tuple[int, Any], tmp_path: Path
) -> None:
    """A stand-in that takes its time (log-normal, median 500 ms, sigma 0.5) and 512
    groups in flight: what the plane holds while requests wait."""
    workers, client = cluster
    latency = Latency(500.0, 0.5)
    server = start_standin_engine(StandinSettings(NAME, latency=latency, seed=1))
    try:
        s = PlaneSettings(in_flight=512, warmup_groups=256, measured_groups=1024)
        run = _measure(benchmark, client, server, tmp_path, s)
    finally:
        server.stop()
    _report(benchmark, f"{workers} workers, 512 in flight, 8/task, {latency.describe()}", run)


@pytest.mark.benchmark(group="control-plane")
@pytest.mark.parametrize("cluster", [4], indirect=True, ids=["4w"])
def test_plane_with_long_answers(benchmark: Any, cluster: tuple[int, Any], tmp_path: Path) -> None:
    """512-token answers (each with its log-probs): the pool commits and the driver's
    batches carry 512x the tokens."""
    workers, client = cluster
    server = start_standin_engine(StandinSettings(NAME, response_tokens=512))
    try:
        s = PlaneSettings(in_flight=64)
        run = _measure(benchmark, client, server, tmp_path, s, tokens=512)
    finally:
        server.stop()
    _report(benchmark, f"{workers} workers, 64 in flight, 8/task, 512-token answers", run)
