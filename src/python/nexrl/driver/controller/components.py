"""``Components``: the running pieces of one run (``build`` starts them in order) and
what the loop asks of them besides their own calls: ``cluster.json``, the reward
curve, the dashboard's samples, the summary, shutting everything down.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.util.files import atomic_write_text
from nexrl.driver.controller.dispatch import RolloutDispatcher
from nexrl.driver.controller.handoff import WeightHandoff
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.controller.sync import SyncPolicy
from nexrl.inference.supervisor import InferenceSupervisor

if TYPE_CHECKING:
    from nexrl.core.pool import TrajectoryPool
    from nexrl.driver.cluster.cluster import ClusterHandle
    from nexrl.driver.data import DataLoader
    from nexrl.driver.metrics import MetricsTracker, ProgressDisplay
    from nexrl.trainer.handle import TrainerHandle

__all__ = ["Components", "write_cluster_record"]

logger = logging.getLogger(__name__)


@dataclass
class Components:
    """The running pieces of one run (built in order by ``build_components``)."""

    run: RunDir
    sync_policy: SyncPolicy
    cluster: ClusterHandle
    trainer: TrainerHandle  # trainer.mode: self-hosted (TrainerGroup) | training-service
    supervisor: InferenceSupervisor
    pool: TrajectoryPool
    loader: DataLoader
    dispatcher: RolloutDispatcher
    tracker: MetricsTracker
    progress: ProgressDisplay
    val_groups: list[list[dict[str, Any]]]
    snapshot_dir: Path
    pad_token_id: int
    groups_per_batch: int
    group_size: int  # trajectories per group (rollout_worker.group_size)
    plot_every: int
    plot_min_interval_s: float
    _closers: list[Any] = field(default_factory=list)
    _plot_pool: Any = None  # the background redraw's thread (plot_in_background)
    _plotting: Any = None  # its future
    _plotted_at: float | None = None  # time.monotonic() when the last redraw started
    _plot_rows: Any = None  # nexrl.driver.metrics.tail.PlotRows: metrics.jsonl read incrementally
    tokenizer: Any = None  # decodes the trajectories the dashboard shows
    dashboard_url: str = ""  # the run's /nexrl page ("" when the scheduler cannot serve it)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # the trainer ranks' setup
    handoff: WeightHandoff = field(
        default_factory=lambda: WeightHandoff(False, "weight.handoff: files")
    )  # how weights reach inference (nexrl.driver.controller.handoff)

    def say_where(self) -> None:
        """The lines that say where to watch the run: its folder, the Dask dashboard,
        its Slurm jobs, its page."""
        write = self.progress.write
        write(f"nexrl: run folder {self.run.root}")
        write(f"nexrl: Dask dashboard {self.cluster.dashboard_link}")
        jobs = self.cluster.job_ids()
        if jobs:
            listed = ", ".join(f"{role} {' '.join(ids)}" for role, ids in jobs.items())
            write(f"nexrl: Slurm jobs: {listed} (all cancelled when the run ends)")
        if self.dashboard_url:
            write(f"nexrl: run page {self.dashboard_url}")

    def record_cluster(self) -> None:
        """Rewrite ``cluster.json`` (a job or worker was replaced, the server restarted);
        a failure is a warning, never a stop."""
        try:
            write_cluster_record(
                self.run.root / "cluster.json", self.cluster, self.ranks, self.supervisor
            )
        except Exception as exc:
            logger.warning("cluster.json not updated: %s", exc)

    def pending_groups(self) -> int:
        """Groups committed to the pool and not yet handed out."""
        return math.ceil(self.pool.stats().pending / self.group_size)

    def plot_in_background(self) -> None:
        """Redraw the reward curve on a thread of its own, so a step never waits for
        matplotlib (~0.1 s a redraw on a 2-core machine); skipped while the previous
        redraw is still running or the last one started less than
        ``plot_min_interval_s`` ago. ``finish`` waits for it and draws the final one."""
        if self._plotting is not None and not self._plotting.done():
            return
        now = time.monotonic()
        if self._plotted_at is not None and now - self._plotted_at < self.plot_min_interval_s:
            return
        self._plotted_at = now
        if self._plot_pool is None:
            self._plot_pool = ThreadPoolExecutor(1, thread_name_prefix="nexrl-plot")
            self._closers.append(lambda: self._plot_pool.shutdown(wait=False, cancel_futures=True))
        self._plotting = self._plot_pool.submit(self.plot)

    def plot(self) -> Path | None:
        from nexrl.driver.metrics import plot_reward_curve
        from nexrl.driver.metrics.tail import PlotRows

        try:
            if self._plot_rows is None:
                self._plot_rows = PlotRows(self.run.metrics)
            return plot_reward_curve(self._plot_rows.rows(), self.run.plots / "reward_curve.png")
        except Exception as exc:  # a plot must never stop training
            logger.warning("reward curve plot failed: %s", exc)
            return None

    def record_samples(self, step: int, trained: Any) -> None:
        """A few decoded trajectories of the step's batch for the /nexrl page."""
        from nexrl.driver.dashboard.samples import append_samples, sample_rows

        tok = self.tokenizer
        try:
            rows = sample_rows(
                trained, step, tok.decode, lambda ids: [tok.decode([t]) for t in ids]
            )
            append_samples(self.run.root / "samples.jsonl", rows)
        except Exception as exc:  # the page must never stop training
            logger.warning("dashboard samples at step %d: %s", step, exc)

    def finish(self) -> str:
        """Plot the reward curve and write summary.json; the summary text."""
        from nexrl.driver.metrics import read_metrics, write_summary
        from nexrl.driver.metrics.summary import SUMMARY_FILE

        if self._plotting is not None:
            with contextlib.suppress(Exception):  # plot() logs its own failures
                self._plotting.result(timeout=120)
        png = self.plot()
        try:
            rows = read_metrics(self.run.metrics)
        except FileNotFoundError:  # removed after the last row was written
            logger.warning("%s is gone: the summary has no training rows", self.run.metrics)
            rows = []
        text = str(write_summary(self.run.root, rows))
        ends = [p for p in (png, self.run.root / "config.yaml", self.run.root / SUMMARY_FILE) if p]
        try:  # the trackers that keep files with their run (mlflow) get them
            self.tracker.log_artifacts(ends)
        finally:
            self.tracker.close()
        return text

    def close(self) -> None:
        for close in reversed(self._closers):
            try:
                close()
            except Exception as exc:
                logger.warning("shutdown: %s", exc)
        self._closers = []


def write_cluster_record(
    path: Path, cluster: Any, ranks: list[dict[str, Any]], supervisor: Any
) -> None:
    """``<run>/cluster.json``: where each part of the run is running (on Slurm: the
    job id each component reports from inside its job); rewritten (atomically) when a
    part moves, and at the end of the run."""
    import json
    import os

    def job_id() -> str | None:
        return os.environ.get("SLURM_JOB_ID")

    trainers = set(cluster.trainer_workers or [])
    # on_error="return": a worker that cannot answer (lost, or its node cut off the
    # network) is left out; "raise" failed the whole record and left the other workers'
    # failed sends to asyncio, which printed their tracebacks at exit
    rollout = {
        addr: jid
        for addr, jid in cluster.client.run(job_id, on_error="return").items()
        if addr not in trainers
        and addr != cluster.inference_worker
        and not isinstance(jid, BaseException)
    }
    server = {"pid": getattr(supervisor.server, "pid", None)}  # a local server's own
    server.update(getattr(supervisor.server, "info", None) or {})  # a job's: node, job id
    record = {
        "scheduler": cluster.scheduler_address,  # tls://… with cluster.tls
        "dashboard": cluster.dashboard_link,
        "slurm_jobs": cluster.job_ids(),
        "trainer_ranks": ranks,
        "inference": {"base_urls": supervisor.base_urls, **server},
        "rollout_workers": rollout,
    }
    text = json.dumps(record, indent=2, default=str) + "\n"
    atomic_write_text(path, text, fsync=False, fsync_parent=False)
