"""The controller's rollout plane driven as ``nexrl train`` drives it, with the trainer's
step left out, and what it costs the driver (for the control-plane scale benchmark and
its CI-sized test).

Real parts, as the controller builds them: a ``LocalCluster`` of worker processes
made with the runtime's own arguments (``local_cluster_kwargs``: each worker offers
``CPU`` = its threads, rollouts ask for 1), the default recipe's data through
``DataLoader`` (endless epochs), ``RolloutScheduler`` (top-up, retry, dedup),
``RolloutDispatcher`` (rollout + evaluator futures, ``groups_per_task`` groups a task),
the recipe's evaluator on the workers, a zarr ``TrajectoryPool`` (``dedup_groups`` as
the controller's), and the engine behind ``base_urls`` (vLLM's path: one request with
``n`` per group, versions read from the pool's record).

The loop is ``RolloutService.next_batch`` and the driver's share of
``_train_one_step``: harvest finished tasks into the scheduler, top up, ask the pool
for a batch, wait for a task (at most 0.2 s); a batch is deduplicated
(``first_copy_index``), taken into columns, and its rows' addresses made into the
``BatchRef`` the trainer ranks would read from the pool; no trainer runs, so a
step costs the driver only what the driver does. Left out: the inference supervisor,
heartbeats, metrics rows, checkpoints (per step, not per group).

Measured over a window after a warm-up (workers import, pool segments opened):
the driver process's CPU seconds (its main thread, the controller loop, apart from
the rest: the Dask scheduler and the client's comms share this process, as in
``nexrl train``), its worker processes' and the engine's, and main-thread CPU per
phase of the loop. CPU seconds, unlike wall time, hardly move with the machine's load.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.driver.controller.counters import RunCounters
from nexrl.driver.controller.dispatch import RolloutDispatcher
from nexrl.driver.controller.scheduler import RolloutScheduler
from nexrl.driver.data.loader import DataLoader, LoaderConfig
from nexrl.rollout.worker.spec import RolloutSpec

__all__ = ["PlaneRun", "PlaneSettings", "drive_plane", "plane_cluster", "plane_spec"]

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes/max_digit/data/train.jsonl"
EVALUATOR = ("recipes/max_digit/evaluator.py", "MaxDigitEvaluator")
WORKER_IMPORTS = (
    "nexrl.rollout.worker.tasks",
    "nexrl.rollout.worker.simple",
    "nexrl.core.chat.client",
    "nexrl.core.pool.writer",
    "nexrl.rollout.evaluators.registry",
)
PHASES = ("harvest", "top_up", "get_batch", "hand_off", "wait")


@dataclass(frozen=True)
class PlaneSettings:
    """One measurement point: groups in flight and how they are cut into tasks."""

    in_flight: int  # rollout_worker.max_groups_in_flight (and the scheduler's target)
    groups_per_task: int = 8  # rollout_worker.groups_per_task (the default recipe's)
    group_size: int = 8  # rollout_worker.group_size
    batch_groups: int = 16  # groups per training batch (trajectory_pool.batch_size / group_size)
    warmup_groups: int = 128
    measured_groups: int = 256
    total_epochs: int | None = None  # data.total_epochs (None: endless, 210 prompts an epoch)


@dataclass
class PlaneRun:
    """What one window cost; ``group_ids``: every group delivered in a batch (warm-up
    included), in the order delivered."""

    settings: PlaneSettings
    groups: int = 0  # groups delivered in the window
    batches: int = 0
    wall_s: float = 0.0
    driver_cpu_s: float = 0.0  # the whole driver process (controller loop + Dask scheduler)
    loop_cpu_s: float = 0.0  # its main thread: the controller loop
    workers_cpu_s: float = 0.0  # every worker process (and nanny)
    engine_cpu_s: float = 0.0
    task_s: dict[str, float] = field(default_factory=dict)  # per task kind, mean compute s
    phase_cpu_s: dict[str, float] = field(default_factory=dict)  # main thread, per phase
    failed_groups: int = 0
    duplicates_dropped: int = 0
    group_ids: list[int] = field(default_factory=list)
    load_1m: float = 0.0  # the machine's 1-minute load average at the end of the window

    @property
    def trajectories(self) -> int:
        return self.groups * self.settings.group_size

    @property
    def groups_per_s(self) -> float:
        return self.groups / self.wall_s if self.wall_s else 0.0

    def per_group_ms(self, cpu_s: float) -> float:
        return 1000.0 * cpu_s / self.groups if self.groups else math.nan

    def row(self) -> dict[str, float]:
        """The figures of the window (benchmark ``extra_info``)."""
        out = {
            "groups": float(self.groups),
            "groups_per_s": self.groups_per_s,
            "trajectories_per_s": self.trajectories / self.wall_s if self.wall_s else 0.0,
            "driver_cpu_ms_per_group": self.per_group_ms(self.driver_cpu_s),
            "loop_cpu_ms_per_group": self.per_group_ms(self.loop_cpu_s),
            "scheduler_cpu_ms_per_group": self.per_group_ms(self.driver_cpu_s - self.loop_cpu_s),
            "driver_cpu_share": self.driver_cpu_s / self.wall_s if self.wall_s else 0.0,
            "workers_cpu_ms_per_group": self.per_group_ms(self.workers_cpu_s),
            "engine_cpu_ms_per_group": self.per_group_ms(self.engine_cpu_s),
            "load_1m": self.load_1m,
        }
        out.update({f"{k}_task_ms": 1000.0 * v for k, v in self.task_s.items()})
        out.update(
            {f"loop_{k}_ms_per_group": self.per_group_ms(v) for k, v in self.phase_cpu_s.items()}
        )
        return out


@contextlib.contextmanager
def plane_cluster(workers: int, threads_per_worker: int = 4) -> Iterator[Any]:
    """A ``Client`` on a ``LocalCluster`` of ``workers`` processes made as ``nexrl train``
    makes its local cluster (``cluster.n_workers``, ``cluster.threads_per_worker``)."""
    from distributed import Client, LocalCluster

    from nexrl.core.config.sections.cluster import ClusterConfig
    from nexrl.driver.cluster.cluster import local_cluster_kwargs

    cfg = ClusterConfig(
        n_workers=workers, threads_per_worker=threads_per_worker, dashboard_address="127.0.0.1:0"
    )
    kwargs = local_cluster_kwargs(cfg, gpus_per_worker=0)
    with LocalCluster(**kwargs) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers, timeout=300)
        # what a worker imports on its first rollout, done now on every worker: a window
        # must not measure imports on workers the warm-up's tasks did not reach
        for module in WORKER_IMPORTS:
            client.run(importlib.import_module, module)
        yield client


def plane_spec(base_url: str, served_name: str, pool: PoolConfig, max_tokens: int) -> RolloutSpec:
    """The rollout spec ``rollout_spec`` makes for an engine given by ``base_urls``
    (vLLM's path: one request with ``n`` per group, no batch route, versions from the
    pool's record) and the default recipe's worker and evaluator."""
    return RolloutSpec(
        worker_type="simple",
        evaluator=EVALUATOR,
        roots=(str(ROOT),),
        base_urls=(base_url,),
        served_model_name=served_name,
        sampling=(("temperature", 1.0), ("top_p", 1.0), ("max_tokens", max_tokens)),
        pool=pool,
        seed=42,
        versions_from_pool=True,
        group_requests=True,
        batch_requests=False,
    )


def plane_pool(store: Path, s: PlaneSettings) -> PoolConfig:
    """The controller's pool config: grouped by ``group_id``, batches of whole groups,
    second copies of a group dropped (``dedup_groups``)."""
    return PoolConfig(
        store=str(store),
        key_list=["group_id"],
        group_size=s.group_size,
        batch_size=s.batch_groups * s.group_size,
        dedup_groups=True,
    )


def _cpu(proc: psutil.Process) -> float:
    with contextlib.suppress(psutil.Error):
        t = proc.cpu_times()
        return float(t.user + t.system)
    return 0.0


def _compute_s(client: Any) -> dict[str, float]:
    """Seconds of compute the scheduler has recorded so far per task kind (``rollout``,
    ``evaluate``: scoring plus the pool commit); a sum that only grows."""

    def read(dask_scheduler: Any) -> dict[str, float]:
        return {
            name: float(prefix.all_durations.get("compute", 0.0))
            for name, prefix in dask_scheduler.task_prefixes.items()
        }

    return dict(client.run_on_scheduler(read))


def _main_thread_cpu(me: psutil.Process) -> float:
    for t in me.threads():
        if t.id == me.pid:  # Linux: the main thread's id is the process id
            return float(t.user_time + t.system_time)
    return 0.0


@dataclass
class _Meter:
    """CPU seconds of the driver, its main thread, its workers and the engine."""

    engine_pid: int | None
    me: psutil.Process = field(default_factory=psutil.Process)

    def read(self) -> tuple[float, float, float, float, float]:
        children = self.me.children(recursive=True)
        engine = sum(_cpu(c) for c in children if c.pid == self.engine_pid)
        workers = sum(_cpu(c) for c in children if c.pid != self.engine_pid)
        return time.perf_counter(), _cpu(self.me), _main_thread_cpu(self.me), workers, engine


def drive_plane(
    client: Any,
    spec: RolloutSpec,
    s: PlaneSettings,
    batch_dir: Path,
    engine_pid: int | None = None,
) -> PlaneRun:
    """Run the controller's loop (module doc) until ``warmup_groups`` and then
    ``measured_groups`` more groups were delivered in batches; then cancel what is in
    flight. Returns the window's figures."""
    from nexrl.trainer.batch_io import BatchRef

    counters = RunCounters()
    scheduler = RolloutScheduler(
        counters, task_retries=2, max_in_flight=s.in_flight, target=s.in_flight
    )
    dispatcher = RolloutDispatcher(
        client, spec, task_retries=2, rollout_cpus=1, groups_per_task=s.groups_per_task
    )
    pool = TrajectoryPool(spec.pool)
    loader = DataLoader(
        LoaderConfig(
            data_files=[str(DATA)],
            prompt_key="prompt",
            max_prompt_length=32,
            total_epochs=s.total_epochs,
            group_size=s.group_size,
        )
    )

    def pool_groups() -> int:  # Components.pending_groups
        return math.ceil(pool.stats().pending / s.group_size)

    run = PlaneRun(s)
    phase = dict.fromkeys(PHASES, 0.0)
    meter = _Meter(engine_pid)
    delivered, start = 0, None
    step = 0
    try:
        while delivered < s.warmup_groups + s.measured_groups:
            t = time.thread_time()
            h = dispatcher.harvest()  # HarvestRecorder.record, for training groups
            for _, summary in h.done:
                scheduler.record_done(summary)
            for g, failure in h.failed:
                scheduler.record_failure(g, failure)
            t1 = time.thread_time()
            scheduler.top_up(dispatcher, loader, pool_groups)
            t2 = time.thread_time()
            batch = pool.get_batch(
                current_version=0, loaded_batch_finished=scheduler.idle(dispatcher)
            )
            t3 = time.thread_time()
            phase["harvest"] += t1 - t
            phase["top_up"] += t2 - t1
            phase["get_batch"] += t3 - t2
            if batch is None:
                if scheduler.loader_done and scheduler.idle(dispatcher):
                    break  # the data is exhausted (total_epochs) and no batch is left
                dispatcher.wait_any(0.2)
                phase["wait"] += time.thread_time() - t3
                continue
            keep = scheduler.first_copy_index(batch)
            trained = batch.columns.take(keep)
            step += 1
            assert batch.rows is not None  # a pool's batch knows its rows' addresses
            BatchRef(batch.rows.take(keep), 0)  # what the driver sends the trainer ranks
            phase["hand_off"] += time.thread_time() - t3
            delivered += len(keep) // s.group_size
            run.group_ids += sorted({int(g) for g in trained.group_id})
            if start is None and delivered >= s.warmup_groups:
                start = meter.read()
                compute0 = _compute_s(client)
                phase = dict.fromkeys(PHASES, 0.0)
                failed0, dup0 = counters.failed_groups, counters.duplicate_trajectories_dropped
            elif start is not None:
                run.batches += 1
        end = meter.read()
        compute1 = _compute_s(client)
    finally:
        dispatcher.cancel_all()
    if start is None:
        raise RuntimeError(f"the data ran out after {delivered} groups, in the warm-up")
    run.groups = delivered - s.warmup_groups
    run.wall_s = end[0] - start[0]
    run.driver_cpu_s = end[1] - start[1]
    run.loop_cpu_s = end[2] - start[2]
    run.workers_cpu_s = end[3] - start[3]
    run.engine_cpu_s = end[4] - start[4]
    run.phase_cpu_s = phase
    tasks = max(1, run.groups // s.groups_per_task)
    run.task_s = {
        k: (compute1[k] - compute0.get(k, 0.0)) / tasks
        for k in ("rollout", "evaluate")
        if k in compute1
    }
    run.failed_groups = counters.failed_groups - failed0
    run.duplicates_dropped = counters.duplicate_trajectories_dropped - dup0
    run.load_1m = os.getloadavg()[0]
    return run
