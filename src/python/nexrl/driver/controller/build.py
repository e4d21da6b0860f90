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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.util.logfile import LogRotation
from nexrl.driver.controller.components import Components, write_cluster_record
from nexrl.driver.controller.dispatch import RolloutDispatcher
from nexrl.driver.controller.driver_log import DETAILS_LOGGER, log_to_file
from nexrl.driver.controller.handoff import start_handoff
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.controller.setup import (
    data_config,
    load_tokenizer,
    pad_token_id,
    pool_config,
    prompt_length_fn,
    rollout_spec,
    validation_groups,
)
from nexrl.driver.controller.stragglers import Stragglers
from nexrl.driver.controller.sync import SyncPolicy
from nexrl.driver.modeling.folder import (
    chat_template_needed,
    require_chat_template,
    tokenizer_field,
)
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import Recipe
from nexrl.inference.spec import InferenceSpec
from nexrl.inference.supervisor import InferenceSupervisor

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig
    from nexrl.driver.cluster.cluster import ClusterHandle
    from nexrl.trainer import TrainerSpec
    from nexrl.trainer.handle import TrainerHandle
    from nexrl.trainer.service.group import ServiceTrainerGroup

__all__ = ["build_components", "install_dashboard", "service_trainer"]

logger = logging.getLogger("nexrl.driver.controller.components")  # the name its log lines had


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
    from nexrl.core.pool import TrajectoryPool
    from nexrl.core.process.task_logs import install_task_logs, route_logs
    from nexrl.core.weights.snapshot import latest_snapshot
    from nexrl.core.weights.snapshot_read import wait_for_snapshot
    from nexrl.driver.cluster.cluster import start_cluster
    from nexrl.driver.data import DataLoader
    from nexrl.driver.metrics import MetricsTracker, ProgressDisplay
    from nexrl.trainer import TrainerGroup, TrainerSpec

    cfg = recipe.spec
    out = Path(cfg.output_dir)
    sync_policy = SyncPolicy(cfg.weight.sync_mode, cfg.weight.staleness_threshold)
    pool_cfg = pool_config(cfg, sync_policy)
    run = RunDir(out)
    closers.append(run.lock())  # one run per folder, held until everything is shut down
    run.prepare(recipe, pool_cfg.store)
    rotation = LogRotation.from_config(cfg.logger)
    closers.append(log_to_file(run, cfg.logger.level, rotation))

    model_dir, tok_dir = prepare_model(cfg, run.root, recipe.roots, progress, should_stop)
    tokenizer = load_tokenizer(tok_dir, tokenizer_field(cfg))
    why = chat_template_needed(cfg)
    if why:
        require_chat_template(tokenizer, tok_dir, why, tokenizer_field(cfg))
    length = prompt_length_fn(tokenizer)
    loader = DataLoader(data_config(recipe, model_dir), length)
    val_groups = validation_groups(recipe, length, model_dir)
    group_size = cfg.rollout_worker.group_size

    inference_cfg = cfg.service.inference_service
    # Dask's error records (task tracebacks): in full in the log files, once on the
    # terminal; undone after the cluster closed (closers run in reverse). asyncio's
    # too: a scheduler's call to a worker whose job ended under it (a trainer rank's
    # step, proxied, when the run stops on a lost node) is a "Task exception was never
    # retrieved" record with a traceback
    closers.append(
        route_logs(
            run.logs / "driver.log",
            ("distributed", "asyncio"),
            shown_as="logs/driver.log",
            rotation=rotation,
        )
    )
    cluster = start_cluster(
        cfg.cluster,
        cfg.experiment_name,
        max(1, cfg.resource.trainer_gpus),
        plugins=recipe.plugins,  # imported in every worker before any task or actor
        trainer_ranks=cfg.trainer.world_size,
        inference_job=not inference_cfg.base_urls,
        log_dir=run.logs / "slurm",
        roots=recipe.roots,  # where relative cluster.tls files resolve
        should_stop=should_stop,  # Ctrl-C while Slurm jobs are pending
    )
    closers.append(cluster.close)
    install_task_logs(cluster.client, run.logs, rotation)
    logger.info("Dask scheduler: %s", cluster.scheduler_address)
    logger.info("Dask dashboard: %s", cluster.dashboard_link)
    for role, ids in cluster.job_ids().items():
        logger.info("slurm: %s jobs %s", role, " ".join(ids) or "(none yet)")
    dashboard_url = install_dashboard(recipe, cluster, run)

    snapshot_dir = Path(cfg.weight.snapshot_dir)
    supervisor = InferenceSupervisor(
        InferenceSpec.from_recipe(cfg),
        log_dir=run.logs,
        server_factory=cluster.server_factory(),  # Slurm: in the inference job
        snapshot_ready=lambda path, version: wait_for_snapshot(
            path, version, inference_cfg.startup_timeout_s, root=snapshot_dir
        ),  # a restart while the handoff's snapshot is written behind (weight.handoff)
        log_rotation=rotation,
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
        trainer_timeout_s = cfg.runtime_monitor.task_timeout_s + 600.0
        trainer: TrainerHandle
        if cfg.trainer.mode == "training-service":
            trainer = service_trainer(cfg, cluster, spec, trainer_timeout_s)
        else:
            trainer = TrainerGroup.create(
                cluster.client,
                spec,
                gpus_per_rank=cfg.resource.trainer_gpus,
                workers=cluster.trainer_workers,  # Slurm: rank r in trainer job r
                timeout_s=trainer_timeout_s,
                silent_s=cfg.runtime_monitor.trainer_silent_s,
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
    handoff = start_handoff(cfg, trainer, supervisor, info)  # weight.handoff
    write_cluster_record(run.root / "cluster.json", cluster, ranks, supervisor)

    pool = TrajectoryPool(pool_cfg)
    pool.end_weight_sync(version)
    rm = cfg.runtime_monitor
    dispatcher = RolloutDispatcher(
        cluster.client,
        rollout_spec(recipe, pool_cfg, urls),
        task_retries=cfg.rollout_worker.task_retries,
        rollout_cpus=cfg.resource.rollout_cpus,
        task_timeout_s=rm.task_timeout_s,
        groups_per_task=cfg.rollout_worker.groups_per_task,
        stragglers=Stragglers(rm.straggler_factor, rm.straggler_min_s),
    )
    closers.append(dispatcher.cancel_all)
    resumed = info.get("resumed_from") is not None
    step = int(info["global_step"] or 0)
    tracker = MetricsTracker(
        list(cfg.logger.backends),
        out,
        run_name=cfg.experiment_name,
        config=recipe.record(),  # ${oc.env:...} kept: no secret goes to a tracker
        resume_step=step if resumed else None,
        roots=recipe.roots,  # a sink class 'path/to/file.py:Name' resolves as the check did
    )
    closers.append(tracker.close)
    display = ProgressDisplay(
        cfg.trainer.total_train_steps,
        step,
        enabled=progress,
        log=logging.getLogger(DETAILS_LOGGER),  # each step's line in logs/driver.log too
    )
    closers.append(display.close)
    batch_size = cfg.trajectory_pool.batch_size
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
        plot_every=cfg.logger.plot_every,
        plot_min_interval_s=cfg.logger.plot_min_interval_s,
        _closers=closers,
        tokenizer=tokenizer,
        dashboard_url=dashboard_url,
        ranks=ranks,
        handoff=handoff,
    )


def service_trainer(
    cfg: RecipeConfig, cluster: ClusterHandle, spec: TrainerSpec, timeout_s: float
) -> ServiceTrainerGroup:
    """``trainer.mode: training-service``: a client of ``trainer.service_url``, or of a
    service this run starts on a trainer worker (a Dask actor, closed with the run)."""
    import os

    from nexrl.trainer.service.actor import start_service_on_cluster
    from nexrl.trainer.service.client import TrainingClient
    from nexrl.trainer.service.group import ServiceTrainerGroup
    from nexrl.trainer.service.server import TOKEN_ENV

    token = os.environ.get(TOKEN_ENV) or None
    url, handle = cfg.trainer.service_url, None
    if not url:
        workers = cluster.trainer_workers
        handle = start_service_on_cluster(
            cluster.client,
            spec,
            worker=workers[0] if workers else None,
            gpus=cfg.resource.trainer_gpus,
            token=token,
            timeout_s=timeout_s,
        )
        url = handle.url
        logger.info("training service started on %s: %s", handle.worker, url)
    client = TrainingClient(url, token=token, step_timeout_s=timeout_s)
    try:
        client.wait_healthy(timeout_s=max(60.0, cfg.runtime_monitor.health_timeout_s))
    except BaseException:
        client.close()
        if handle is not None:
            handle.close()
        raise
    return ServiceTrainerGroup(client, timeout_s=timeout_s, handle=handle)


def install_dashboard(recipe: Recipe, cluster: ClusterHandle, run: RunDir) -> str:
    """Add the /nexrl page to the scheduler's dashboard; its URL ("" if it cannot)."""
    from nexrl.driver.dashboard.plugin import install

    identity = {
        "recipe": str(recipe.path),
        "experiment": recipe.spec.experiment_name,
        "total_steps": recipe.spec.trainer.total_train_steps,
    }
    try:
        return install(cluster.client, str(run.root), identity)
    except Exception as exc:  # e.g. a scheduler that cannot import nexrl
        logger.warning("the /nexrl dashboard page is not available: %s", exc)
        return ""
