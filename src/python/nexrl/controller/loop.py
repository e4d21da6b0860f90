"""``Controller``: the RL loop on Dask.

One step::

    top up rollouts   data loader -> rollout + evaluator futures -> zarr pool
    wait for a batch  pool.get_batch(): whole groups, exactly once
    train             trainer actors (DeepSpeed) on the batch file; snapshot vN
    sync weights      inference reloads vN from the path the step reported
                      (how: ``nexrl.controller.sync``)
    validate / checkpoint / log every N steps

While the trainer runs, the controller keeps servicing rollouts (harvests
results, counts failures, restarts a dead inference server, and in the async
modes dispatches more). Which groups go out (top-up, retry, skip) and which
come back to be trained (dedup) is the ``RolloutScheduler``'s business
(``nexrl.controller.scheduler``). A trainer step returns a typed
``StepResult`` (counters, the published snapshot's path, metrics); the step's
metrics row is built from it.

Dynamic sampling (``algorithm.filter_zero_variance_groups``): the pool drops
groups whose rewards are all equal (counted, never trained), so the top-up
rolls out replacements and a batch still holds ``batch_size`` informative
trajectories. Once ``algorithm.max_extra_sampling_rounds`` rounds' worth of
groups (``groups_per_batch`` each) were filtered for one step, the step takes
what is ready (a short batch, at least one group) and says so (a warning and
``filter/short_batch``). Every wait is bounded; Ctrl-C (SIGINT) or SIGTERM
stops at the next safe point, checkpoints and shuts everything down.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import OmegaConf

from nexrl.controller.build import build_components
from nexrl.controller.components import Components
from nexrl.controller.dispatch import Harvest
from nexrl.controller.driver_log import DETAILS_LOGGER
from nexrl.controller.errors import ControllerError, RunResult
from nexrl.controller.evaluator_stats import EvaluatorFailurePolicy, evaluator_metrics
from nexrl.controller.scheduler import RolloutScheduler
from nexrl.controller.state import ControllerState, committed_group_ids
from nexrl.recipe import Recipe
from nexrl.trainer.heartbeats import QuietNotice
from nexrl.util.disk import free_bytes, human_bytes, no_space_left, says_no_space

if TYPE_CHECKING:
    from nexrl.trainer.result import StepResult

__all__ = ["Controller", "ControllerError", "RunResult"]

logger = logging.getLogger(__name__)
POLL_S = 0.05
VAL_ITEMS_PER_TASK = 16


class Controller:
    """Drives one run of a recipe (see the module doc)."""

    def __init__(self, recipe: Recipe, *, progress: bool | None = None) -> None:
        self.recipe = recipe
        self.cfg = recipe.cfg
        self.show_progress = progress
        self.components: Components | None = None  # built by run()
        self.step = 0
        self.version = 0
        self.stop_reason: str | None = None
        self.summary: str | None = None  # the end-of-run summary, once written
        self._replaced_server_failures = 0  # failed groups sent to a server replaced since
        self.counters: dict[str, float] = {
            "failed_groups": 0,
            "duplicate_trajectories_dropped": 0,
            "delivered_trajectories": 0,
            "evaluator_errors": 0,
            "groups_rolled_out": 0,
            "inference_restarts": 0,
            "retried_groups": 0,
            "retry_backoff_s": 0.0,
            "workers_lost": 0,
        }
        self.scheduler = RolloutScheduler(
            self.counters,
            task_retries=int(self.cfg.rollout_worker.task_retries),
            max_in_flight=int(self.cfg.rollout_worker.max_groups_in_flight),
            retry_backoff_s=float(self.cfg.rollout_worker.retry_backoff_s),
            retry_backoff_max_s=float(self.cfg.rollout_worker.retry_backoff_max_s),
        )
        self._lost_workers: collections.deque[tuple[str, int]] = collections.deque()
        self._last_health = 0.0
        self._filtered_mark = 0  # the pool's filtered_groups at the last batch
        self._last_ckpt_step = -1
        self._seen_restarts = 0  # the inference supervisor's restarts counted so far
        self._cluster_changed = False  # a worker joined or left, the server restarted
        self._first_step = 0  # the step this command started at (set by _loop)
        self._val_summaries: list[Any] = []  # validation results being collected
        self.evaluator_policy = EvaluatorFailurePolicy(
            int(self.cfg.rollout_worker.max_evaluator_error_steps),
            str(OmegaConf.select(self.cfg, "rollout_worker.evaluator", default="none")),
        )

    # -- entry ------------------------------------------------------------------
    def run(self) -> RunResult:
        from nexrl.trainer.actor import TrainerGroupError

        previous = self._install_signals()
        try:
            if str(self.cfg.get("mode", "rl")) == "sft":  # no rollouts (nexrl.controller.sft)
                from nexrl.controller.sft import SftRun

                steps, out, summary = SftRun(
                    self.recipe,
                    progress=self.show_progress,
                    should_stop=lambda: self.stop_reason is not None,
                ).run()
                return RunResult(steps, out, self.stop_reason, summary)
            done = self._finished_before()
            if done is not None:
                return done
            self.components = build_components(
                self.recipe,
                progress=self.show_progress,
                should_stop=lambda: self.stop_reason is not None,
            )
            parts = self.components
            self._watch_workers()
            self.scheduler.target = parts.groups_per_batch * parts.sync_policy.batches_dispatched
            try:
                self._resume()
                self._filtered_mark = self._filtered_groups()
                return self._loop()
            except Exception as exc:
                message = self._stopped_by(exc, TrainerGroupError)
                if message is None:
                    raise
                # the traceback for logs/driver.log; the terminal gets the one line
                logging.getLogger(DETAILS_LOGGER).error("%s", message, exc_info=exc)
                raise ControllerError(message) from exc
        finally:
            self._restore_signals(previous)
            if self.components is not None:
                with contextlib.suppress(Exception):  # no events to a client that closes
                    self.components.cluster.client.unsubscribe_topic("all")
                self.components.close()
                if self.summary is not None:  # last, after what shutting down printed
                    self.components.progress.write(self.summary)

    def _finished_before(self) -> RunResult | None:
        """A rerun of a finished run: no cluster is started, the run's summary is shown
        again (from metrics.jsonl) with how to train on."""
        from nexrl.controller.rundir import RunDir
        from nexrl.controller.setup import absolute_output_dir
        from nexrl.metrics import format_summary, read_metrics, summarize

        run = RunDir(absolute_output_dir(self.cfg))
        line = run.finished(self.cfg)
        if line is None:
            return None
        step = run.checkpoint_step()
        rows = read_metrics(run.metrics) if run.metrics.exists() else []
        self.summary = format_summary(summarize(rows))
        # (not summarize's evaluator_error_share: a step without errors may lack the metric)
        shares = [r.get("eval/evaluator_error") for r in rows if "reward/mean" in r]
        if shares and all(share == 1.0 for share in shares):  # as check_finished() judged
            raise ControllerError(
                f"{run.root} finished at step {step} having trained on "
                "nothing but evaluator errors (eval/evaluator_error 1.0 at every step; see "
                "logs/dask-worker-*.log); fix the evaluator and start a new run with "
                "another experiment_name"
            )
        print(f"{line}\n{self.summary}", file=sys.stderr, flush=True)
        return RunResult(step, run.root, None, self.summary)

    def _install_signals(self) -> dict[int, Any]:
        def handler(signum: int, _frame: Any) -> None:
            name = signal.Signals(signum).name
            if self.stop_reason is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now
            self.stop_reason = name
            logger.warning("%s: stopping at the next safe point (checkpoint, then exit)", name)

        previous: dict[int, Any] = {}
        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handler)
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, h in previous.items():
            signal.signal(sig, h)

    # -- resume -----------------------------------------------------------------
    def _resume(self) -> None:
        parts = self.parts
        info = parts.trainer.setup_info()[0]
        self.step = int(info["global_step"] or 0)
        self.version = int(info["policy_version"] or 0)
        if not info.get("resumed_from"):
            parts.run.record_config(self.cfg)
            return
        extra = parts.trainer.call("extra_state")[0]
        state = ControllerState.from_extra_state(extra)
        if state is None:
            raise ControllerError(
                f"checkpoint {info['resumed_from']} has no controller state (written by a "
                "trainer alone?); resume it with the API that wrote it or resume.mode=disable"
            )
        if state.loader is not None:
            parts.loader.load_state_dict(state.loader)
        if state.pool is not None:
            try:
                parts.pool.load_state_dict(state.pool)
            except ValueError as exc:  # the pool the checkpoint was written with is gone
                raise ControllerError(
                    f"checkpoint {info['resumed_from']} cannot resume the trajectory pool "
                    f"{self.cfg.trajectory_pool.store} ({exc}): was it deleted, moved or "
                    "replaced since? Put the run's pool back there (trajectory_pool.store), "
                    "or start a new run in another output_dir"
                ) from exc
        self.counters.update(state.counters)
        self.scheduler.restore(state.pending, state.trained, committed_group_ids(parts.pool))
        if state.row is not None:  # killed after the checkpoint, before its row was logged
            parts.tracker.restore(self.step, state.row)
        self._last_ckpt_step = self.step
        if info.get("resume_note"):  # a corrupted checkpoint or snapshot was passed over
            logger.warning("%s", info["resume_note"])
            parts.progress.write(f"warning: {info['resume_note']}")
        if info.get("schedule_note"):  # the resumed recipe moved the LR schedule's end
            logger.warning("%s", info["schedule_note"])
            parts.progress.write(f"warning: {info['schedule_note']}")
        self._record_changes(parts.run.record_config(self.cfg))
        logger.info(
            "resumed from %s at step %d (policy v%d); %d groups were in flight, %d groups "
            "already in the pool are not rolled out again",
            info["resumed_from"],
            self.step,
            self.version,
            len(state.pending),
            len(self.scheduler.skip),
        )

    def _record_changes(self, changes: list[str], shown: int = 8) -> None:
        """Say which settings a resume changed (config.yaml now records the new ones)."""
        if not changes:
            return
        more = f"; and {len(changes) - shown} more" if len(changes) > shown else ""
        self.parts.progress.write(
            f"nexrl: resumed with {len(changes)} changed setting(s) (config.yaml records "
            f"them now): {'; '.join(changes[:shown])}{more}"
        )
        details = logging.getLogger(DETAILS_LOGGER)  # every one, in logs/driver.log only
        details.info("settings changed on resume:\n  %s", "\n  ".join(changes))

    def _stopped_by(self, exc: Exception, trainer_error: type) -> str | None:
        """The one line that stops the run for ``exc`` when its cause is known: the Dask
        scheduler gone, a full disk, a trainer rank failed; None for anything else."""
        if self.components is None:
            return None
        if self.parts.cluster.scheduler_lost():
            return self._scheduler_lost_message()
        full = no_space_left(exc, self._written_folders())
        if full is not None:
            return self._disk_full_message(full)
        if isinstance(exc, trainer_error):  # a rank failed or its worker died mid-run
            return self._trainer_stopped(exc)
        return None

    def _resume_hint(self) -> str:
        """Where a rerun resumes: the checkpoint a resume picks on disk (a save whose
        reply was lost with a dying worker may have completed)."""
        step = self._last_ckpt_step
        if self.components is not None:
            step = max(step, self.parts.run.checkpoint_step())
        if step > 0:
            return f"from its checkpoint of step {step}"
        return "from the start (no checkpoint was written yet: see trainer.save_every)"

    def _trainer_stopped(self, exc: Any) -> str:
        """The one line that stops a run whose trainer failed: which ranks (and, on
        Slurm, their jobs), what happened, and how to resume."""
        jobs = self.components.cluster.job_ids().get("trainer", []) if self.components else []
        where = ", ".join(
            f"rank {r} (Slurm job {jobs[r]})" if r < len(jobs) else f"rank {r}" for r in exc.ranks
        )
        return (
            f"the trainer failed{' on ' + where if where else ''} at step {self.step + 1}: {exc}; "
            f"run the same command again to resume {self._resume_hint()}"
        )

    def _scheduler_lost_message(self) -> str:
        cluster = self.parts.cluster
        if cluster.cluster is None:  # cluster.type=address: the user runs the scheduler
            restart = (
                "start a scheduler and its workers again (the new address in cluster.address), "
                "then run the same command"
            )
        else:
            restart = "run the same command again"
        return (
            f"the Dask scheduler at {cluster.address} is gone (lost at step {self.step + 1}; "
            f"its workers and the trainer on them with it); {restart} to resume "
            f"{self._resume_hint()}"
        )

    def _written_folders(self) -> list[Path]:
        """Where the run writes: the fullest of them is named when a write fails."""
        parts = self.parts
        folders = [parts.run.root, parts.run.checkpoints, parts.snapshot_dir]
        if "://" not in str(parts.pool.url):  # a local pool store (not an fsspec URL)
            folders.append(Path(str(parts.pool.url)))
        return folders

    def _disk_full_message(self, path: Path) -> str:
        free = free_bytes(path)
        left = f" ({human_bytes(free)} free)" if free is not None else ""
        return (
            f"no space left on device: {path}{left}; the run stopped after step {self.step}; "
            f"free some space there (earlier checkpoints and the pool are kept), then run "
            f"the same command again to resume {self._resume_hint()}"
        )

    @property
    def parts(self) -> Components:
        """The running components (``run`` builds them)."""
        assert self.components is not None, "Controller.run() builds the components"
        return self.components

    # -- the loop ---------------------------------------------------------------
    def _loop(self) -> RunResult:
        parts = self.parts
        total = int(self.cfg.trainer.total_train_steps)
        self._first_step = self.step
        parts.progress.write(f"nexrl: run folder {parts.run.root}")
        parts.progress.write(f"nexrl: Dask dashboard {parts.cluster.dashboard_link}")
        jobs = parts.cluster.job_ids()
        if jobs:
            listed = ", ".join(f"{role} {' '.join(ids)}" for role, ids in jobs.items())
            parts.progress.write(f"nexrl: Slurm jobs: {listed} (all cancelled when the run ends)")
        if parts.dashboard_url:
            parts.progress.write(f"nexrl: run page {parts.dashboard_url}")
        if self.step == 0 and self.cfg.validate.validate_before_train and parts.val_groups:
            parts.tracker.log(0, self._validate())
        while self.step < total and self.stop_reason is None:
            row = self._train_one_step()
            if row is None:
                break
            parts.tracker.log(self.step, row)
            parts.progress.update(self.step, row)
            if parts.plot_every and self.step % parts.plot_every == 0:
                parts.plot_in_background()
        every = int(self.cfg.validate.every)
        if (
            parts.val_groups
            and every
            and self.step > 0
            and self.step % every
            and self.stop_reason is None
        ):
            parts.tracker.log(self.step, self._validate())  # the final policy is always validated
        if self.step > self._last_ckpt_step and self.step > 0:
            self._checkpoint()
        if self._cluster_changed:
            parts.record_cluster()
        summary = self.summary = parts.finish()  # printed by run() once all is closed
        logging.getLogger(DETAILS_LOGGER).info("%s", summary)  # logs/driver.log has it too
        failed = self.evaluator_policy.check_finished()
        if failed is not None:
            raise ControllerError(failed)
        return RunResult(self.step, parts.run.root, self.stop_reason, summary)

    def _train_one_step(self) -> dict[str, Any] | None:
        parts = self.parts
        t0 = time.perf_counter()
        while True:
            batch = self._next_batch()
            if batch is None:
                return None
            self.counters["delivered_trajectories"] += len(batch)
            keep = self.scheduler.first_copy_index(batch)
            if len(keep):
                break  # (a batch holding only second copies is skipped whole)
        t_batch = time.perf_counter()
        filtered = self._filtered_groups() - self._filtered_mark
        self._filtered_mark += filtered
        from nexrl.trainer.batch_io import save_batch
        from nexrl.types.batch import Batch

        # commit order depends on timing; (group, run) order makes a seeded run repeatable
        cols = batch.columns
        keep = keep[np.lexsort((cols.run_id[keep], cols.group_id[keep]))]
        trained = cols.take(keep)  # the pool's columns, straight into the trainer's Batch
        path = parts.run.batches / f"step_{self.step + 1}.pt"
        save_batch(Batch.from_columns(trained, parts.pad_token_id), path)
        version_before = self.version
        pending = parts.trainer.start("step", str(path))  # TrainerGroupError: see run()
        notice = QuietNotice(float(self.cfg.runtime_monitor.wait_notice_s))
        while not pending.done():
            if time.monotonic() > pending.deadline:
                raise ControllerError(
                    f"trainer: train_step {self.step + 1} still running after "
                    f"{parts.trainer.timeout_s:g}s (a hung rank?); see logs/driver.log"
                )
            self._service(dispatch=parts.sync_policy.dispatch_while_training)
            line = notice.line(self.step + 1, getattr(parts.trainer, "heartbeats", None))
            if line:
                logger.warning("%s", line)
                parts.progress.write(f"warning: {line}")
            pending.wait(POLL_S)  # returns the moment the step is done (or a rank is silent)
        result: StepResult = pending.result()[0]  # rank 0's: it holds the snapshot path
        path.unlink(missing_ok=True)
        t_train = time.perf_counter()
        self.step = result.global_step
        self.version = result.policy_version
        row = self._step_row(batch, trained, result, version_before)
        if row.get("train/skipped_nonfinite"):
            note = (
                f"step {self.step}: the loss or gradient norm was NaN/inf; its update was "
                f"skipped ({int(row.get('train/skipped_nonfinite_total', 0))} so far; "
                f"trainer.max_nonfinite_steps={int(self.cfg.trainer.max_nonfinite_steps)} in a "
                "row stop the run)"
            )
            logger.warning("%s", note)
            parts.progress.write(f"warning: {note}")
        if parts.pool.config.filter_zero_variance:
            row.update(self._filter_row(trained, filtered))
        parts.record_samples(self.step, trained)
        stop = self.evaluator_policy.observe(trained)
        if stop is not None:
            parts.tracker.log(self.step, row)  # the step trained: its row is kept
            raise ControllerError(stop)
        if result.published_version is not None:
            row.update(self._sync_weights(result))
        t_sync = time.perf_counter()
        every = int(self.cfg.validate.every)
        if parts.val_groups and every and self.step % every == 0:
            row.update(self._validate())
        row.update(
            {
                "timing/wait_batch": t_batch - t0,
                "timing/train": t_train - t_batch,
                "timing/weight_sync": t_sync - t_train,
            }
        )
        save_every = int(self.cfg.trainer.save_every)
        if save_every and self.step % save_every == 0:
            t = time.perf_counter()
            self._timed(row, t0, len(trained), t)
            self._checkpoint(row)  # carries the row: a kill before it is logged loses nothing
            row["timing/checkpoint"] = time.perf_counter() - t
        self._timed(row, t0, len(trained), time.perf_counter())
        return row

    @staticmethod
    def _timed(row: dict[str, Any], t0: float, samples: int, end: float) -> None:
        """The step's total time and throughput, from ``t0`` to ``end``."""
        row["timing/step"] = end - t0
        row["perf/trajectories_per_s"] = samples / max(end - t0, 1e-9)

    def _step_row(
        self, batch: Any, trained: Any, result: StepResult, version_before: int
    ) -> dict[str, Any]:
        """The step's metrics row: the pool batch, the columns trained (``trained``),
        the counters and the trainer's result."""
        rewards = np.asarray(trained.reward, dtype=np.float64)
        versions = np.asarray(trained.policy_version)
        row: dict[str, Any] = {
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std()),
            "version/trainer": self.version,
            "version/rollout_min": int(versions.min()),
            "version/rollout_max": int(versions.max()),
            "version/lag_max": int(version_before - versions.min()),  # the one lag metric
            "rollout/failed_groups": self.counters["failed_groups"],
            "rollout/evaluator_errors": self.counters["evaluator_errors"],
            "rollout/groups_done": self.counters["groups_rolled_out"],
            "pool/delivered_total": self.counters["delivered_trajectories"],
            "inference/restarts": self.counters["inference_restarts"],
            "rollout/retried_groups": self.counters["retried_groups"],
            "rollout/retry_backoff_s": self.counters["retry_backoff_s"],
            "cluster/workers_lost": self.counters["workers_lost"],
            "rollout/duplicate_trajectories_dropped": self._duplicates_dropped(),
            "rollout/in_flight": self.parts.dispatcher.running_trajectories("train"),
        }
        row.update(batch.metrics())
        row.update(evaluator_metrics(trained))  # eval/<name>: mean over the step's batch
        for k, v in result.row().items():
            row[f"timing/trainer_{k[7:]}" if k.startswith("timing/") else k] = v
        return row

    def _filter_row(self, trained: Any, filtered: int) -> dict[str, float]:
        """Dynamic sampling metrics of one step: groups trained, groups filtered since
        the last batch, the extra rounds that took, and whether the batch is short."""
        per_round = self.parts.groups_per_batch
        short = len(trained) < int(self.cfg.trajectory_pool.batch_size)
        kept = len(np.unique(np.asarray(trained.group_id)))
        if short:
            logger.warning(
                "dynamic sampling: step %d trains on %d informative groups (%d trajectories, "
                "batch_size %d): %d groups were filtered (algorithm.max_extra_sampling_rounds"
                "=%d)",
                self.step,
                kept,
                len(trained),
                int(self.cfg.trajectory_pool.batch_size),
                filtered,
                int(self.cfg.algorithm.max_extra_sampling_rounds),
            )
        return {
            "filter/kept_groups": float(kept),
            "filter/dropped_groups": float(filtered),
            "filter/extra_rounds": float(-(-filtered // per_round)),
            "filter/short_batch": float(short),
        }

    def _duplicates_dropped(self) -> int:
        """Second copies of groups dropped so far: by the pool (before a batch is picked)
        and by the scheduler (a pool cursor written before the pool dropped them)."""
        pool = int(self.parts.pool.cursor.counters.get("duplicate_dropped_trajectories", 0))
        return pool + int(self.counters["duplicate_trajectories_dropped"])

    def _filtered_groups(self) -> int:
        """Groups the pool's filter dropped so far (its cursor's counter)."""
        return int(self.parts.pool.cursor.counters.get("filtered_groups", 0))

    def _short_batch_floor(self) -> int | None:
        """``min_trajectories`` for the pool: 1 once this step's extra sampling rounds
        are used up (take what is ready), else None (a full batch)."""
        parts = self.parts
        if not parts.pool.config.filter_zero_variance:
            return None
        cap = int(self.cfg.algorithm.max_extra_sampling_rounds) * parts.groups_per_batch
        return 1 if self._filtered_groups() - self._filtered_mark >= cap else None

    def _check_not_all_filtered(self) -> None:
        """Dynamic sampling that finds no informative group at all (an evaluator that gives
        every answer the same reward) would roll out forever: once eight times the extra
        rounds' worth of groups were filtered for this command's first step and not one
        group was kept, stop. Later (a policy that answers almost every prompt alike) the
        step keeps waiting for an informative group, and the wait notice says so."""
        parts = self.parts
        if not parts.pool.config.filter_zero_variance or self.step > self._first_step:
            return
        rounds = int(self.cfg.algorithm.max_extra_sampling_rounds)
        limit = 8 * max(rounds, 1) * parts.groups_per_batch
        filtered = self._filtered_groups() - self._filtered_mark
        if filtered >= limit:
            raise ControllerError(
                f"dynamic sampling: step {self.step + 1} found no group with different "
                f"rewards in {filtered} groups rolled out (all were filtered as zero-variance: "
                "algorithm.filter_zero_variance_groups); check that the evaluator does not "
                "give every answer the same reward (or, on a resumed run, that the policy "
                "has not converged), or raise "
                f"algorithm.max_extra_sampling_rounds (now {rounds}) for a task whose "
                "informative groups are rare"
            )

    # -- rollouts ---------------------------------------------------------------
    def _next_batch(self) -> Any:
        """Top up rollouts and wait until the pool hands out a batch; None when the
        data is exhausted or a stop was asked for."""
        parts = self.parts
        started = said = time.monotonic()
        notice_s = float(self.cfg.runtime_monitor.wait_notice_s)
        while self.stop_reason is None:
            self._service(dispatch=True)
            if time.monotonic() - said >= notice_s:
                said = time.monotonic()
                self._say_waiting(said - started)
            quiet = self.scheduler.idle(parts.dispatcher)
            batch = parts.pool.get_batch(
                current_version=self.version,
                loaded_batch_finished=quiet,
                min_trajectories=self._short_batch_floor(),
            )
            if batch is not None:
                return batch
            self._check_not_all_filtered()
            if quiet and self.scheduler.loader_done:
                logger.info("data exhausted (data.total_epochs) and the pool has no full batch")
                return None
            parts.dispatcher.wait_any(0.2)
        return None

    def _say_waiting(self, waited: float) -> None:
        """One line for a step whose batch is long in coming (a slow or hung evaluator
        or server), so a stalled terminal says what it waits for and what ends it."""
        parts = self.parts
        stats = parts.pool.stats()
        timeout = float(self.cfg.runtime_monitor.task_timeout_s)
        parts.progress.write(
            f"step {self.step + 1}: waiting {waited:.0f}s for a batch: "
            f"{parts.dispatcher.running_trajectories('train')} trajectories in flight, "
            f"{stats.ready} of {int(self.cfg.trajectory_pool.batch_size)} ready in the pool"
            + (
                f", {self._filtered_groups() - self._filtered_mark} groups filtered as "
                "zero-variance (dynamic sampling)"
                if parts.pool.config.filter_zero_variance
                else ""
            )
            + "; a rollout or evaluator task running past runtime_monitor.task_timeout_s="
            f"{timeout:g} is cancelled and retried"
        )

    def _service(self, dispatch: bool) -> None:
        """Harvest finished rollouts, count failures, watch inference, top up."""
        parts = self.parts
        self._watch_scheduler()
        check_trainer = getattr(parts.trainer, "check_heartbeats", None)
        if check_trainer is not None:  # a stopped trainer worker also holds rollout tasks
            check_trainer(f"worker (step {self.step + 1})")
        self._record(parts.dispatcher.harvest())
        now = time.monotonic()
        if now - self._last_health >= float(self.cfg.runtime_monitor.health_check_interval_s):
            self._last_health = now
            parts.supervisor.check()
            self._follow_inference_restarts()
            self._count_lost_workers()
            if self._cluster_changed:
                self._cluster_changed = False
                parts.record_cluster()
        if dispatch:
            self.scheduler.top_up(parts.dispatcher, parts.loader, parts.pending_groups)

    def _watch_scheduler(self) -> None:
        """Stop the run when the Dask scheduler is gone. The client notices a lost
        connection at once and tries to reconnect for its timeout (60 s for
        ``cluster.type=address``), then closes; the run stops as soon as the client is
        not connected and nothing answers at the scheduler's address, or once the
        client gave up: every wait on the cluster is bounded by that."""
        cluster = self.parts.cluster
        status = str(getattr(cluster.client, "status", "running"))
        if status == "running":
            return
        if status in ("closing", "closed", "failed") or cluster.scheduler_lost():
            raise ControllerError(self._scheduler_lost_message())

    def _watch_workers(self) -> None:
        """Hear of every Dask worker the scheduler removes (its ``remove-worker`` events,
        pushed to the client: no polling). A worker killed, out of memory or whose job
        ended is ``expected: False``; one closed on purpose is not counted."""

        def on_event(event: Any) -> None:  # on the client's event loop thread
            _, msg = event
            action = msg.get("action") if isinstance(msg, dict) else None
            if action in ("add-worker", "remove-worker"):
                self._cluster_changed = True  # cluster.json is rewritten at the next check
            lost = action == "remove-worker"
            if lost and not msg.get("expected"):
                self._lost_workers.append(
                    (str(msg.get("worker")), len(msg.get("processing-tasks") or ()))
                )

        try:
            self.parts.cluster.client.subscribe_topic("all", on_event)
        except Exception as exc:  # a client that cannot subscribe: no count, no stop
            logger.debug("worker events: %s", exc)

    def _count_lost_workers(self) -> None:
        """Count the workers lost since the last check: Dask reruns their tasks
        elsewhere; ``cluster/workers_lost`` says how often that happened (a worker its
        nanny restarts comes back under a new address)."""
        while self._lost_workers:
            worker, tasks = self._lost_workers.popleft()
            self.counters["workers_lost"] += 1
            logger.warning(
                "Dask worker %s was lost with %d tasks running (%d workers lost so far); its "
                "tasks run again elsewhere",
                worker,
                tasks,
                int(self.counters["workers_lost"]),
            )

    def _follow_inference_restarts(self) -> None:
        """Count the supervisor's restarts and send rollouts to the new server."""
        parts = self.parts
        new = parts.supervisor.restarts - self._seen_restarts
        if new > 0:
            self._seen_restarts = parts.supervisor.restarts
            self.counters["inference_restarts"] += new
            self._cluster_changed = True  # the server's new pid (and job) in cluster.json
            parts.dispatcher.spec = parts.dispatcher.spec.with_base_urls(parts.supervisor.base_urls)

    def _record(self, h: Harvest) -> None:
        for g, summary in h.done:
            if g.tag == "train":
                self.scheduler.record_done(summary)
            else:
                self._val_summaries.append(summary)
        limit = int(self.cfg.runtime_monitor.max_task_failures)
        parts = self.parts
        if any(f.component == "rollout" for _, f in h.failed) and parts.supervisor.exited():
            # every rollout sent to a dead server fails: start another now, not at the
            # next health check (runtime_monitor.health_check_interval_s)
            parts.supervisor.check()
            self._follow_inference_restarts()
        current = tuple(parts.dispatcher.spec.base_urls)
        for g, failure in h.failed:
            if says_no_space(failure.error):  # a pool chunk could not be written
                raise ControllerError(f"rollout: {failure.describe()}")
            self.scheduler.record_failure(g, failure)
            if (
                failure.component == "rollout"
                and g.task is not None
                and g.task.base_urls != current
                and parts.supervisor.restarts <= max(3, limit)
            ):
                # sent to a server that died and was replaced since: rolled out again,
                # counted in inference/restarts, not against max_task_failures (up to
                # max(3, max_task_failures) restarts: a server that a request kills again
                # and again must still stop the run)
                self._replaced_server_failures += 1
            failed = self.counters["failed_groups"] - self._replaced_server_failures
            if failed > limit:
                raise ControllerError(
                    f"{int(failed)} rollout groups failed (limit "
                    f"runtime_monitor.max_task_failures={limit}); last: {failure.describe()}"
                )

    # -- weights ----------------------------------------------------------------
    def _sync_weights(self, result: StepResult) -> dict[str, float]:
        """Reload inference on the snapshot the step published (its path comes with
        the step's result: nothing is looked up on disk)."""
        parts = self.parts
        if result.snapshot_path is None or result.published_version != self.version:
            raise ControllerError(
                f"trainer published snapshot v{result.published_version} at step {self.step} "
                f"but reported {result.snapshot_path or 'no path'} (policy v{self.version})"
            )
        out: dict[str, float] = {}
        if parts.sync_policy.drain_before_reload:
            t = time.perf_counter()
            self._record(parts.dispatcher.drain(float(self.cfg.runtime_monitor.task_timeout_s)))
            out["timing/drain"] = time.perf_counter() - t
        out["weight/in_flight_at_reload"] = float(parts.dispatcher.running_trajectories("train"))
        parts.pool.begin_weight_sync(self.version)
        try:
            out["timing/reload"] = parts.supervisor.reload(Path(result.snapshot_path), self.version)
        except Exception as exc:
            raise ControllerError(f"inference: {exc}") from exc
        self._follow_inference_restarts()  # a hung server is replaced by the reload
        parts.pool.end_weight_sync(self.version)
        out["version/inference"] = float(self.version)
        return out

    # -- validation and checkpoints ---------------------------------------------
    def _validate(self) -> dict[str, float]:
        parts = self.parts
        t = time.perf_counter()
        spec = parts.dispatcher.spec.with_sampling(temperature=float(self.cfg.validate.temperature))
        items = [i for g in parts.val_groups for i in g]
        for k in range(0, len(items), VAL_ITEMS_PER_TASK):  # few futures: less overhead
            parts.dispatcher.submit(
                items[k : k + VAL_ITEMS_PER_TASK], commit=False, spec=spec, tag="val"
            )
        self._val_summaries = []
        failed_before = self.counters["failed_groups"]
        while parts.dispatcher.running("val"):
            parts.dispatcher.wait_any(0.2)
            self._service(dispatch=False)
        rewards = [r for s in self._val_summaries for r in s.rewards]
        errors = sum(s.evaluator_errors for s in self._val_summaries)
        failed = self.counters["failed_groups"] - failed_before
        out = {
            "val/reward/mean": float(np.mean(rewards)) if rewards else float("nan"),
            "val/num_samples": float(len(rewards)),
            "val/evaluator_errors": float(errors),
            "val/failed_groups": failed,
            "val/time_s": time.perf_counter() - t,
        }
        problems = [f"{errors} evaluator errors, scored 0"] if errors else []
        problems += [f"{failed} prompts failed"] if failed else []
        seen = f"; {', '.join(problems)}: see logs/dask-worker-*.log" if problems else ""
        parts.progress.write(
            f"validation at step {self.step}: reward {out['val/reward/mean']:.3f} "
            f"({len(rewards)} samples{seen})"
        )
        return out

    def _checkpoint(self, row: dict[str, Any] | None = None) -> None:
        """A trainer checkpoint at this step with the controller's state; ``row``: the
        step's metrics row when it is not logged yet (a resume logs it if it is missing)."""
        from nexrl.trainer.actor import TrainerGroupError

        parts = self.parts
        pending = self.scheduler.pending(parts.dispatcher)
        state = ControllerState(
            step=self.step,
            loader=parts.loader.state_dict(),
            pool=parts.pool.state_dict(),
            pending=pending,
            counters=dict(self.counters),
            trained=dict(self.scheduler.trained),
            row=None if row is None else {str(k): float(v) for k, v in row.items()},
        )
        try:
            parts.trainer.save_checkpoint(state.to_extra_state())
        except TrainerGroupError:
            raise  # run() names the ranks and how to resume
        except Exception as exc:
            raise ControllerError(f"trainer checkpoint at step {self.step}: {exc}") from exc
        self._last_ckpt_step = self.step
