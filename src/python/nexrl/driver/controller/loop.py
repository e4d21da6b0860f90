"""``Controller``: the RL loop on Dask.

One step (``Controller._train_one_step``), its stages in order::

    batch     top up rollouts (data loader -> rollout + evaluator futures -> zarr
              pool) until the pool hands out whole groups, exactly once
    train     the trainer actors (DeepSpeed) on the batch, which each rank reads from
              the pool (``BatchRef``: no batch file); snapshot vN published
    report    the step's metrics row, warnings, samples
    sync      inference onto vN (how: ``nexrl.driver.controller.sync``)
    validate  every ``validate.every`` steps; checkpoint every ``trainer.save_every``

While the trainer runs, the controller keeps servicing rollouts (harvests results,
counts failures, restarts a dead inference server, in the async modes dispatches
more). Which groups go out (top-up, retry, skip) and which come back to be trained
(dedup) is the ``RolloutScheduler``'s business; ``RolloutService``
(``nexrl.driver.controller.rollouts``) keeps it going while the controller waits.
Dynamic sampling (``algorithm.filter_zero_variance_groups``): the pool drops groups
whose rewards are all equal, the top-up rolls out replacements, and after
``algorithm.max_extra_sampling_rounds`` rounds a step takes a short batch and says
so (``filter/short_batch``). Every wait is bounded; Ctrl-C (SIGINT) or SIGTERM stops
at the next safe point, checkpoints and shuts everything down. The controller's
state: ``step``, ``version``, ``counters`` (``RunCounters``) and the scheduler's.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nexrl.core.util.heap import trim_heap
from nexrl.driver.controller.build import build_components
from nexrl.driver.controller.checkpoints import save_checkpoint
from nexrl.driver.controller.counters import RunCounters
from nexrl.driver.controller.diagnostics import StopDiagnosis
from nexrl.driver.controller.disk_watch import DiskWatch
from nexrl.driver.controller.driver_log import DETAILS_LOGGER
from nexrl.driver.controller.errors import ControllerError, RunResult
from nexrl.driver.controller.evaluator_stats import EvaluatorFailurePolicy
from nexrl.driver.controller.reload import WeightSyncError, sync_weights
from nexrl.driver.controller.report import (
    counter_metrics,
    filter_row,
    step_row,
    timed,
    warn_skipped_update,
)
from nexrl.driver.controller.resume import finished_run, restore_state, say_resumed
from nexrl.driver.controller.rollouts import RolloutService, Waiting
from nexrl.driver.controller.signals import StopSignals
from nexrl.driver.controller.validation import validate
from nexrl.driver.metrics.learning_signal import LearningSignalWatch
from nexrl.driver.recipe import Recipe
from nexrl.trainer.heartbeats import QuietNotice
from nexrl.trainer.rank_calls import RankCall

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.trainer.result import StepResult

__all__ = ["Controller", "ControllerError", "RunResult"]

logger = logging.getLogger(__name__)
POLL_S = 0.05
TRIM_EVERY = 100  # steps between two malloc_trim calls in the driver (~ms each)


class Controller:
    """Drives one run of a recipe (see the module doc)."""

    def __init__(self, recipe: Recipe, *, progress: bool | None = None) -> None:
        self.recipe = recipe
        self.spec = recipe.spec  # the checked recipe, typed
        self.show_progress = progress
        self.components: Components | None = None  # built by run()
        self.step = 0
        self.version = 0
        self.signals = StopSignals()  # Ctrl-C, SIGTERM: stop_reason
        self.summary: str | None = None  # the end-of-run summary, once written
        self.counters = RunCounters()
        # generate and score: scheduler, cluster watch, harvest, dynamic sampling's count
        self.rollouts = RolloutService(self.spec, self.counters)
        self.scheduler = self.rollouts.scheduler
        self.watch = self.rollouts.watch
        self.harvest = self.rollouts.harvest
        self.filtered = self.rollouts.filtered
        self._last_ckpt_step = -1
        self.disk: DiskWatch | None = None  # made with the run's folders (_watch_disk)
        self._first_step = 0  # the step this command started at (set by _loop)
        rw = self.spec.rollout_worker
        self.evaluator_policy = EvaluatorFailurePolicy(
            rw.max_evaluator_error_steps, rw.evaluator or "none"
        )
        self.signal_watch = LearningSignalWatch(decode=self._decode)

    @property
    def stop_reason(self) -> str | None:
        """The signal that asked the run to stop (None: none yet)."""
        return self.signals.reason

    @stop_reason.setter
    def stop_reason(self, reason: str | None) -> None:
        self.signals.reason = reason

    def _decode(self, ids: Sequence[int]) -> str:
        """Token ids as text (the run's tokenizer), for the learning-signal warnings."""
        return str(self.parts.tokenizer.decode(ids))

    @property
    def parts(self) -> Components:
        """The running components (``run`` builds them)."""
        assert self.components is not None, "Controller.run() builds the components"
        return self.components

    # -- entry ------------------------------------------------------------------
    def run(self) -> RunResult:
        from nexrl.trainer.errors import TrainerGroupError

        self.signals.install()
        try:
            if self.spec.mode == "sft":  # no rollouts (nexrl.driver.controller.sft)
                from nexrl.driver.controller.sft import SftRun

                steps, out, summary = SftRun(
                    self.recipe,
                    progress=self.show_progress,
                    should_stop=lambda: self.stop_reason is not None,
                ).run()
                return RunResult(steps, out, self.stop_reason, summary)
            done = finished_run(self.recipe)
            if done is not None:
                self.summary = done.summary
                return done
            self.components = build_components(
                self.recipe,
                progress=self.show_progress,
                should_stop=lambda: self.stop_reason is not None,
            )
            parts = self.components
            self.rollouts.attach(parts)
            try:
                self._resume()
                self.filtered.start(parts.pool)
                return self._loop()
            except Exception as exc:
                message = self._diagnosis().message_for(exc, TrainerGroupError)
                if message is None:
                    raise
                # the traceback for logs/driver.log; the terminal gets the one line
                logging.getLogger(DETAILS_LOGGER).error("%s", message, exc_info=exc)
                raise ControllerError(message) from exc
        finally:
            self.signals.restore()
            if self.components is not None:
                with contextlib.suppress(Exception):  # no events to a client that closes
                    self.components.cluster.client.unsubscribe_topic("all")
                self.components.close()
                if self.summary is not None:  # last, after what shutting down printed
                    self.components.progress.write(self.summary)

    def _resume(self) -> None:
        parts = self.parts
        info = parts.trainer.setup_info()[0]
        self.step = int(info["global_step"] or 0)
        self.version = int(info["policy_version"] or 0)
        state = restore_state(parts, self.recipe, info, self.counters, self.scheduler, self.step)
        if state is None:  # a fresh run
            return
        self._last_ckpt_step = self.step
        skipped = len(self.scheduler.skip)
        say_resumed(parts, self.recipe, info, state, self.step, self.version, skipped)

    def _diagnosis(self) -> StopDiagnosis:
        """What a stop's message says: this step, the last checkpoint."""
        return StopDiagnosis(self.parts, self.step, self._last_ckpt_step)

    # -- the loop ---------------------------------------------------------------
    def _loop(self) -> RunResult:
        parts = self.parts
        total = self.spec.trainer.total_train_steps
        self._first_step = self.step
        parts.say_where()
        if self.step == 0 and self.spec.validate.validate_before_train and parts.val_groups:
            parts.tracker.log(0, self._validate())
        while self.step < total and self.stop_reason is None:
            row = self._train_one_step()
            if row is None:
                break
            parts.tracker.log(self.step, row)
            parts.progress.update(self.step, row)
            self._watch_disk()
            if self.step % TRIM_EVERY == 0:
                trim_heap()  # the driver's RSS crept up without it (nexrl.core.util.heap)
            if parts.plot_every and self.step % parts.plot_every == 0:
                parts.plot_in_background()
        every = self.spec.validate.every
        if (
            parts.val_groups
            and every
            and self.step > 0
            and self.step % every
            and self.step < total  # the last step's row holds it (_train_one_step)
            and self.stop_reason is None
        ):
            parts.tracker.log(self.step, self._validate())  # stopped early: no batch came
        if self.step > self._last_ckpt_step and self.step > 0:
            self._checkpoint()
        if self.watch.changed:
            parts.record_cluster()
        summary = self.summary = parts.finish()  # printed by run() once all is closed
        logging.getLogger(DETAILS_LOGGER).info("%s", summary)  # logs/driver.log has it too
        failed = self.evaluator_policy.check_finished()
        if failed is not None:
            raise ControllerError(failed)
        return RunResult(self.step, parts.run.root, self.stop_reason, summary)

    def _train_one_step(self) -> dict[str, Any] | None:
        """One step, top to bottom: the batch (rollouts are generated and scored while
        it waits), train, report, sync, validate, checkpoint; the row's ``timing/*``
        are named after the stages. None: no batch will come (data out, a stop)."""
        t0 = time.perf_counter()
        got = self._batch()
        if got is None:
            return None
        batch, trained, filtered, rows = got
        t_batch = time.perf_counter()
        version_before = self.version
        result = self._train(rows)
        t_train = time.perf_counter()
        row = self._report(batch, trained, filtered, result, version_before)
        self._sync(result, row)
        t_sync = time.perf_counter()
        self._validate_if_due(row)
        row.update(
            {
                "timing/wait_batch": t_batch - t0,
                "timing/train": t_train - t_batch,
                "timing/weight_sync": t_sync - t_train,
            }
        )
        save_every = self.spec.trainer.save_every
        if save_every and self.step % save_every == 0:
            t = time.perf_counter()
            timed(row, t0, len(trained), t)
            self._checkpoint(row)  # carries the row: a kill before it is logged loses nothing
            row["timing/checkpoint"] = time.perf_counter() - t
        row.update(counter_metrics(self.parts, self.counters))  # with what the sync counted
        timed(row, t0, len(trained), time.perf_counter())
        return row

    def _batch(self) -> tuple[Any, Any, int, Any] | None:
        """``(batch, trained, filtered, rows)`` (``RolloutService.next_batch``); None when no
        batch will come (data out, a stop)."""
        at = Waiting(
            self.step,
            self.version,
            self._first_step,
            lambda: self.stop_reason is not None,
            self._lost,
        )
        return self.rollouts.next_batch(self.parts, at)

    def _train(self, rows: Any) -> StepResult:
        """The trainer's step on the trajectories at ``rows`` (``PoolRows``: each rank
        reads them from the pool; rollouts go on meanwhile); rank 0's result, which holds
        the snapshot path. The step and the policy version move on."""
        from nexrl.trainer.batch_io import BatchRef

        parts = self.parts
        ref = BatchRef(rows, parts.pad_token_id)
        pending = parts.trainer.start(RankCall.STEP, ref)  # TrainerGroupError: see run()
        notice = QuietNotice(self.spec.runtime_monitor.wait_notice_s)
        while not pending.done():
            if time.monotonic() > pending.deadline:
                raise ControllerError(
                    f"trainer: train_step {self.step + 1} still running after "
                    f"{parts.trainer.timeout_s:g}s (a hung rank?); see logs/driver.log"
                )
            self._service(dispatch=parts.sync_policy.dispatch_while_training, training=True)
            line = notice.line(self.step + 1, parts.trainer.heartbeats)
            if line:
                parts.progress.warn(line)
            pending.wait(POLL_S)  # returns the moment the step is done (or a rank is silent)
        result: StepResult = pending.result()[0]
        self.step, self.version = result.global_step, result.policy_version
        return result

    def _report(
        self, batch: Any, trained: Any, filtered: int, result: StepResult, version_before: int
    ) -> dict[str, Any]:
        """The step's row, its warnings, its samples; stops the run when the evaluator
        failed for too long (the row is kept)."""
        parts, spec = self.parts, self.spec
        row = step_row(parts, self.counters, batch, trained, result, self.version, version_before)
        warn_skipped_update(parts, row, self.step, spec.trainer.max_nonfinite_steps)
        for line in self.signal_watch.observe(self.step, trained, row):
            parts.progress.warn(line)
        if parts.pool.config.filter_zero_variance:
            row.update(
                filter_row(
                    trained,
                    filtered,
                    self.step,
                    parts.groups_per_batch,
                    spec.trajectory_pool.batch_size,
                    spec.algorithm.max_extra_sampling_rounds,
                )
            )
        parts.record_samples(self.step, trained)
        stop = self.evaluator_policy.observe(trained)
        if stop is not None:
            parts.tracker.log(self.step, row)  # the step trained: its row is kept
            raise ControllerError(stop)
        return row

    def _sync(self, result: StepResult, row: dict[str, Any]) -> None:
        """Inference onto the step's weights when it published (``sync`` metrics into
        ``row``); a failed sync checkpoints the trained step and stops in one line."""
        if result.published_version is None:
            return
        timeout_s = self.spec.runtime_monitor.task_timeout_s
        try:
            row.update(
                sync_weights(
                    self.parts, result, self.step, self.version, self.harvest, self.watch, timeout_s
                )
            )
        except WeightSyncError as exc:  # the step trained: keep it, resume from it
            self._checkpoint(row)
            self.parts.tracker.log(self.step, row)
            raise ControllerError(
                f"{exc}; step {self.step} trained and is checkpointed: run the same "
                "command again to resume from it (inference starts on its weights)"
            ) from exc

    def _validate_if_due(self, row: dict[str, Any]) -> None:
        """Every ``validate.every`` steps, and the final policy always, in its row."""
        every = self.spec.validate.every
        last = self.step == self.spec.trainer.total_train_steps and self.stop_reason is None
        if self.parts.val_groups and every and (self.step % every == 0 or last):
            row.update(self._validate())

    def _service(self, dispatch: bool, training: bool = False) -> None:
        """One turn of the rollouts' work while the controller waits
        (``RolloutService.service``)."""
        self.rollouts.service(
            self.parts, self.step, self._lost, dispatch=dispatch, training=training
        )

    def _lost(self) -> str:
        """The stop line when the Dask scheduler is gone."""
        return self._diagnosis().scheduler_lost()

    # -- validation and checkpoints ---------------------------------------------
    def _validate(self) -> dict[str, float]:
        def service() -> None:
            self._service(dispatch=False)

        return validate(self.parts, self.spec.validate, self.step, self.harvest, service)

    def _watch_disk(self) -> None:
        """After a step: warn of a disk filling up; below its floor, checkpoint (the
        floor is its room) and stop (``nexrl.driver.controller.disk_watch``)."""
        if self.disk is None:
            rm = self.spec.runtime_monitor
            self.disk = DiskWatch(
                self._diagnosis().written_folders(),
                min_free_gb=rm.min_free_disk_gb,
                warn_hours=rm.disk_warn_hours,
            )
        to_go = self.spec.trainer.total_train_steps - self.step
        warning, stop = self.disk.observe(self.step, to_go)
        if warning:
            self.parts.progress.warn(warning)
        if stop:
            if self.step > self._last_ckpt_step:
                self._checkpoint()
            raise ControllerError(f"{stop} {self._diagnosis().resume_hint()}")

    def _checkpoint(self, row: dict[str, Any] | None = None) -> None:
        """A trainer checkpoint at this step (``row``: see ``save_checkpoint``)."""
        save_checkpoint(self.parts, self.scheduler, self.counters, self.step, row)
        self._last_ckpt_step = self.step
