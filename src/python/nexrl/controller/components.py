"""``build_components``: start everything a run needs, in order, and close it all.

Order: run folder and recipe checks → model and data (cheap, fail early) → Dask
cluster → trainer actors (they resume from the newest checkpoint) → inference
service on the trainer's current weights → pool, dispatcher, metrics. If any
step fails, what was already started is closed again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from nexrl.controller.dispatch import RolloutDispatcher
from nexrl.controller.rundir import RunDir
from nexrl.controller.setup import (
    absolute_output_dir,
    data_config,
    load_tokenizer,
    pad_token_id,
    pool_config,
    prompt_length_fn,
    rollout_spec,
    validation_groups,
)
from nexrl.controller.sync import SyncPolicy
from nexrl.inference.lora import adapter_model_name
from nexrl.inference.supervisor import InferenceSupervisor
from nexrl.modeling.folder import chat_template_needed, require_chat_template, tokenizer_field
from nexrl.modeling.prepare import prepare_model
from nexrl.recipe import Recipe
from nexrl.util.files import atomic_write_text
from nexrl.util.logfile import QuietFileHandler

if TYPE_CHECKING:
    from nexrl.data import DataLoader
    from nexrl.metrics import MetricsTracker, ProgressDisplay
    from nexrl.pool import TrajectoryPool
    from nexrl.runtime.cluster import ClusterHandle
    from nexrl.trainer import TrainerGroup
    from nexrl.training_service.group import ServiceTrainerGroup

__all__ = ["Components", "build_components"]

logger = logging.getLogger(__name__)
DETAILS_LOGGER = "nexrl.details"  # goes to logs/driver.log only, never to the terminal


@dataclass
class Components:
    """The running pieces of one run (built in order by ``build_components``)."""

    run: RunDir
    sync_policy: SyncPolicy
    cluster: ClusterHandle
    trainer: TrainerGroup | ServiceTrainerGroup  # trainer.mode: self-hosted | training-service
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
    tokenizer: Any = None  # decodes the trajectories the dashboard shows
    dashboard_url: str = ""  # the run's /nexrl page ("" when the scheduler cannot serve it)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # the trainer ranks' setup

    def record_cluster(self) -> None:
        """Rewrite ``cluster.json`` (a job or worker was replaced, the server restarted);
        a failure is a warning, never a stop."""
        try:
            _write_cluster_record(
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
        from nexrl.metrics import plot_reward_curve, read_metrics

        try:
            return plot_reward_curve(
                read_metrics(self.run.metrics), self.run.plots / "reward_curve.png"
            )
        except Exception as exc:  # a plot must never stop training
            logger.warning("reward curve plot failed: %s", exc)
            return None

    def record_samples(self, step: int, trained: Any) -> None:
        """A few decoded trajectories of the step's batch for the /nexrl page."""
        from nexrl.dashboard.samples import append_samples, sample_rows

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
        from nexrl.metrics import read_metrics, write_summary

        self.tracker.close()
        if self._plotting is not None:
            with contextlib.suppress(Exception):  # plot() logs its own failures
                self._plotting.result(timeout=120)
        self.plot()
        return str(write_summary(self.run.root, read_metrics(self.run.metrics)))

    def close(self) -> None:
        for close in reversed(self._closers):
            try:
                close()
            except Exception as exc:
                logger.warning("shutdown: %s", exc)
        self._closers = []


def _log_to_file(run: RunDir, level: str) -> Any:
    """Send log records to ``logs/driver.log``; returns the function that stops it."""
    handler = QuietFileHandler(run.logs / "driver.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.getLogger("nexrl").setLevel(level)
    # DETAILS_LOGGER: records for this file only (the traceback of what stopped the run)
    details = logging.getLogger(DETAILS_LOGGER)
    details.addHandler(handler)
    details.propagate = False

    def stop() -> None:
        root.removeHandler(handler)
        details.removeHandler(handler)
        handler.close()

    return stop


def build_components(
    recipe: Recipe,
    *,
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Components:
    closers: list[Any] = []
    try:
        return _build(recipe, progress, closers, should_stop)
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        raise


def _build(
    recipe: Recipe,
    progress: bool | None,
    closers: list[Any],
    should_stop: Callable[[], bool] | None = None,
) -> Components:
    from nexrl.data import DataLoader
    from nexrl.metrics import MetricsTracker, ProgressDisplay
    from nexrl.pool import TrajectoryPool
    from nexrl.runtime.cluster import start_cluster
    from nexrl.runtime.task_logs import install_task_logs, route_logs
    from nexrl.trainer import TrainerGroup, TrainerSpec
    from nexrl.weights.snapshot import latest_snapshot

    cfg = recipe.cfg
    out = absolute_output_dir(cfg)
    sync_policy = SyncPolicy(str(cfg.weight.sync_mode), cfg.weight.staleness_threshold)
    pool_cfg = pool_config(cfg, sync_policy)
    run = RunDir(out)
    closers.append(run.lock())  # one run per folder, held until everything is shut down
    run.prepare(cfg, pool_cfg.store)
    closers.append(_log_to_file(run, str(cfg.logger.level)))

    model_dir, tok_dir = prepare_model(cfg, run.root, recipe.roots, progress, should_stop)
    tokenizer = load_tokenizer(tok_dir, tokenizer_field(cfg))
    why = chat_template_needed(cfg)
    if why:
        require_chat_template(tokenizer, tok_dir, why, tokenizer_field(cfg))
    length = prompt_length_fn(tokenizer)
    loader = DataLoader(data_config(recipe), length)
    val_groups = validation_groups(recipe, length)
    group_size = int(cfg.rollout_worker.group_size)

    inference_cfg = cfg.service.inference_service
    # Dask's error records (task tracebacks): in full in the log files, once on the
    # terminal; undone after the cluster closed (closers run in reverse)
    closers.append(route_logs(run.logs / "driver.log", shown_as="logs/driver.log"))
    cluster = start_cluster(
        cfg.cluster,
        str(cfg.experiment_name),
        max(1, int(cfg.resource.trainer_gpus)),
        plugins=recipe.plugins,  # imported in every worker before any task or actor
        trainer_ranks=int(cfg.trainer.world_size),
        inference_job=not inference_cfg.base_urls,
        log_dir=run.logs / "slurm",
        roots=recipe.roots,  # where relative cluster.tls files resolve
        should_stop=should_stop,  # Ctrl-C while Slurm jobs are pending
    )
    closers.append(cluster.close)
    install_task_logs(cluster.client, run.logs)
    logger.info("Dask scheduler: %s", cluster.scheduler_address)
    logger.info("Dask dashboard: %s", cluster.dashboard_link)
    for role, ids in cluster.job_ids().items():
        logger.info("slurm: %s jobs %s", role, " ".join(ids) or "(none yet)")
    dashboard_url = install_dashboard(recipe, cluster, run)

    snapshot_dir = Path(str(cfg.weight.snapshot_dir))
    supervisor = InferenceSupervisor(
        inference_cfg,
        log_dir=run.logs,
        seed=int(cfg.seed),
        server_factory=cluster.server_factory(),  # Slurm: in the inference job
        health_timeout_s=float(cfg.runtime_monitor.health_timeout_s),
        unhealthy_after=int(cfg.runtime_monitor.unhealthy_after),
        snapshot_root=snapshot_dir,
        lora_name=adapter_model_name(cfg),
    )
    closers.append(supervisor.close)
    # On a fresh run (no snapshot yet) a server nexrl starts comes up on the initial
    # model while the trainer ranks set up (each takes seconds). A run that may resume
    # starts it after them, on the trainer's version: the trainer's resume may remove
    # newer snapshots or republish a corrupted one while a server would be loading it.
    early = supervisor.owns_server and latest_snapshot(snapshot_dir) is None
    spec = TrainerSpec.from_recipe(cfg, model_path=model_dir, roots=recipe.roots)
    spec = replace(spec, tokenizer_path=str(tok_dir), auto_checkpoint=False)
    with ThreadPoolExecutor(1, thread_name_prefix="nexrl-inference-start") as background:
        server_up = background.submit(supervisor.start, model_dir, 0) if early else None
        trainer_timeout_s = float(cfg.runtime_monitor.task_timeout_s) + 600.0
        trainer: TrainerGroup | ServiceTrainerGroup
        if str(cfg.trainer.mode) == "training-service":
            trainer = service_trainer(cfg, cluster, spec, trainer_timeout_s)
        else:
            trainer = TrainerGroup.create(
                cluster.client,
                spec,
                gpus_per_rank=int(cfg.resource.trainer_gpus),
                workers=cluster.trainer_workers,  # Slurm: rank r in trainer job r
                timeout_s=trainer_timeout_s,
                silent_s=float(cfg.runtime_monitor.trainer_silent_s),
            )
        closers.append(trainer.close)
        ranks = trainer.setup_info()  # one describe() round trip, also for cluster.json
        if server_up is not None:
            server_up.result()
    info = ranks[0]
    version = int(info["policy_version"] or 0)
    weights: Path = model_dir
    if version > 0:
        snap = latest_snapshot(snapshot_dir)
        if snap is None or snap[0] != version:
            raise RuntimeError(f"resumed at policy v{version} but {snapshot_dir} lacks it")
        weights = snap[1]
    if not early:
        supervisor.start(weights, version)
    if supervisor.lora_name and version == 0:
        # vLLM serves an adapter only once loaded under its name, which every rollout
        # requests: the initial adapter (the base model's outputs) goes first.
        initial = trainer.publish_snapshot()
        if initial is None:
            raise RuntimeError("the trainer published no initial adapter snapshot")
        supervisor.reload(initial, 0)
        logger.info("inference: initial adapter %s loaded as %r", initial, supervisor.lora_name)
    urls = supervisor.base_urls
    _write_cluster_record(run.root / "cluster.json", cluster, ranks, supervisor)

    pool = TrajectoryPool(pool_cfg)
    pool.end_weight_sync(version)
    rm = cfg.runtime_monitor
    dispatcher = RolloutDispatcher(
        cluster.client,
        rollout_spec(recipe, pool_cfg, urls),
        task_retries=int(cfg.rollout_worker.task_retries),
        rollout_cpus=int(cfg.resource.rollout_cpus),
        task_timeout_s=float(rm.task_timeout_s),
        groups_per_task=int(cfg.rollout_worker.groups_per_task),
    )
    closers.append(dispatcher.cancel_all)
    resumed = info.get("resumed_from") is not None
    step = int(info["global_step"] or 0)
    tracker = MetricsTracker(
        list(cfg.logger.backends),
        out,
        run_name=str(cfg.experiment_name),
        config=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
        resume_step=step if resumed else None,
    )
    closers.append(tracker.close)
    display = ProgressDisplay(
        int(cfg.trainer.total_train_steps),
        step,
        enabled=progress,
        log=logging.getLogger(DETAILS_LOGGER),  # each step's line in logs/driver.log too
    )
    closers.append(display.close)
    batch_size = int(cfg.trajectory_pool.batch_size)
    return Components(
        run=run,
        sync_policy=sync_policy,
        cluster=cluster,
        trainer=trainer,
        supervisor=supervisor,
        pool=pool,
        loader=loader,
        dispatcher=dispatcher,
        tracker=tracker,
        progress=display,
        val_groups=val_groups,
        snapshot_dir=snapshot_dir,
        pad_token_id=pad_token_id(tokenizer),
        groups_per_batch=max(1, math.ceil(batch_size / group_size)),
        group_size=group_size,
        plot_every=int(cfg.logger.plot_every),
        plot_min_interval_s=float(cfg.logger.plot_min_interval_s),
        _closers=closers,
        tokenizer=tokenizer,
        dashboard_url=dashboard_url,
        ranks=ranks,
    )


def service_trainer(cfg: Any, cluster: Any, spec: Any, timeout_s: float) -> ServiceTrainerGroup:
    """``trainer.mode: training-service``: a client of ``trainer.service_url``, or of a
    service this run starts on a trainer worker (a Dask actor, closed with the run)."""
    import os

    from nexrl.training_service.actor import start_service_on_cluster
    from nexrl.training_service.client import TrainingClient
    from nexrl.training_service.group import ServiceTrainerGroup
    from nexrl.training_service.server import TOKEN_ENV

    token = os.environ.get(TOKEN_ENV) or None
    url, handle = cfg.trainer.service_url, None
    if not url:
        workers = cluster.trainer_workers
        handle = start_service_on_cluster(
            cluster.client,
            spec,
            worker=workers[0] if workers else None,
            gpus=int(cfg.resource.trainer_gpus),
            token=token,
            timeout_s=timeout_s,
        )
        url = handle.url
        logger.info("training service started on %s: %s", handle.worker, url)
    client = TrainingClient(str(url), token=token, step_timeout_s=timeout_s)
    try:
        client.wait_healthy(timeout_s=max(60.0, float(cfg.runtime_monitor.health_timeout_s)))
    except BaseException:
        client.close()
        if handle is not None:
            handle.close()
        raise
    return ServiceTrainerGroup(client, timeout_s=timeout_s, handle=handle)


def _write_cluster_record(
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
    rollout = {
        addr: jid
        for addr, jid in cluster.client.run(job_id).items()
        if addr not in trainers and addr != cluster.inference_worker
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


def install_dashboard(recipe: Recipe, cluster: ClusterHandle, run: RunDir) -> str:
    """Add the /nexrl page to the scheduler's dashboard; its URL ("" if it cannot)."""
    from nexrl.dashboard.plugin import install

    identity = {
        "recipe": str(recipe.path),
        "experiment": str(recipe.cfg.experiment_name),
        "total_steps": int(recipe.cfg.trainer.total_train_steps),
    }
    try:
        return install(cluster.client, str(run.root), identity)
    except Exception as exc:  # e.g. a scheduler that cannot import nexrl
        logger.warning("the /nexrl dashboard page is not available: %s", exc)
        return ""
