"""``Controller``: the RL loop on Dask.

One step::

    top up rollouts   data loader -> rollout + evaluator futures -> zarr pool
    wait for a batch  pool.get_batch(): whole groups, exactly once
    train             trainer actors (DeepSpeed) on the batch file; snapshot vN
    sync weights      inference reloads vN (how: ``nexrl.controller.sync``)
    validate / checkpoint / log every N steps

While the trainer runs, the controller keeps servicing rollouts (harvests
results, counts failures, restarts a dead inference server, and in the async
modes dispatches more). Every wait is bounded; Ctrl-C (SIGINT) or SIGTERM
stops at the next safe point, checkpoints and shuts everything down.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nexrl.controller.components import Components, build_components
from nexrl.controller.dispatch import Harvest, TaskFailure
from nexrl.controller.state import ControllerState, committed_group_ids
from nexrl.errors import NexrlError
from nexrl.recipe import Recipe
from nexrl.weights.snapshot import latest_snapshot

__all__ = ["Controller", "ControllerError", "RunResult"]

logger = logging.getLogger(__name__)
POLL_S = 0.05
VAL_ITEMS_PER_TASK = 16


class ControllerError(RuntimeError, NexrlError):
    """The run stopped on an error; the message names the failing component."""


@dataclass
class RunResult:
    steps: int
    output_dir: Path
    stopped_by: str | None
    summary: str


class Controller:
    """Drives one run of a recipe (see the module doc)."""

    def __init__(self, recipe: Recipe, *, progress: bool | None = None) -> None:
        self.recipe = recipe
        self.cfg = recipe.cfg
        self.show_progress = progress
        self.c: Components | None = None
        self.step = 0
        self.version = 0
        self.stop_reason: str | None = None
        self.counters: dict[str, float] = {
            "failed_groups": 0,
            "duplicate_trajectories_dropped": 0,
            "delivered_trajectories": 0,
            "evaluator_errors": 0,
            "groups_rolled_out": 0,
            "inference_restarts": 0,
        }
        self._retry: list[list[dict[str, Any]]] = []  # failed groups to roll out again
        self._attempts: dict[int, int] = {}
        self._skip: set[int] = set()
        self.trained: dict[int, str] = {}  # group_id -> pool commit it was trained from
        self._last_failure: TaskFailure | None = None
        self._last_health = 0.0
        self._last_ckpt_step = -1
        self._val_summaries: list[Any] = []  # validation results being collected

    # -- entry ------------------------------------------------------------------
    def run(self) -> RunResult:
        previous = self._install_signals()
        try:
            self.c = build_components(
                self.recipe,
                progress=self.show_progress,
                should_stop=lambda: self.stop_reason is not None,
            )
            self._resume()
            return self._loop()
        finally:
            self._restore_signals(previous)
            if self.c is not None:
                self.c.close()

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
        c = self._c
        info = c.trainer.setup_info()[0]
        self.step = int(info["global_step"] or 0)
        self.version = int(info["policy_version"] or 0)
        if not info.get("resumed_from"):
            return
        extra = c.trainer.call("extra_state")[0]
        state = ControllerState.from_extra_state(extra)
        if state is None:
            raise ControllerError(
                f"checkpoint {info['resumed_from']} has no controller state (written by a "
                "trainer alone?); resume it with the API that wrote it or resume.mode=disable"
            )
        if state.loader is not None:
            c.loader.load_state_dict(state.loader)
        if state.pool is not None:
            c.pool.load_state_dict(state.pool)
        self._retry = list(state.pending)
        self.counters.update(state.counters)
        self.trained = {int(k): v for k, v in state.trained.items()}
        self._skip = committed_group_ids(c.pool)
        self._last_ckpt_step = self.step
        logger.info(
            "resumed from %s at step %d (policy v%d); %d groups were in flight, %d groups "
            "already in the pool are not rolled out again",
            info["resumed_from"],
            self.step,
            self.version,
            len(state.pending),
            len(self._skip),
        )

    @property
    def _c(self) -> Components:
        assert self.c is not None
        return self.c

    # -- the loop ---------------------------------------------------------------
    def _loop(self) -> RunResult:
        c = self._c
        total = int(self.cfg.trainer.total_train_steps)
        c.progress.write(f"nexrl: run folder {c.run.root}")
        c.progress.write(f"nexrl: Dask dashboard {c.cluster.dashboard_link}")
        if self.step == 0 and self.cfg.validate.validate_before_train and c.val_groups:
            c.tracker.log(0, self._validate())
        while self.step < total and self.stop_reason is None:
            row = self._train_one_step()
            if row is None:
                break
            c.tracker.log(self.step, row)
            c.progress.update(self.step, row)
            if c.plot_every and self.step % c.plot_every == 0:
                c.plot()
        freq = int(self.cfg.validate.freq)
        if (
            c.val_groups
            and freq
            and self.step > 0
            and self.step % freq
            and self.stop_reason is None
        ):
            c.tracker.log(self.step, self._validate())  # the final policy is always validated
        if self.step > self._last_ckpt_step and self.step > 0:
            self._checkpoint()
        summary = c.finish()
        c.progress.write(summary)
        return RunResult(self.step, c.run.root, self.stop_reason, summary)

    def _train_one_step(self) -> dict[str, Any] | None:
        c = self._c
        t0 = time.perf_counter()
        while True:
            batch = self._next_batch()
            if batch is None:
                return None
            self.counters["delivered_trajectories"] += len(batch)
            trajectories = self._first_copies(batch)
            if trajectories:
                break  # (a batch holding only second copies is skipped whole)
        t_batch = time.perf_counter()
        from nexrl.trainer.batch_io import save_batch
        from nexrl.types.batch import Batch

        # commit order depends on timing; (group, run) order makes a seeded run repeatable
        trajectories.sort(key=lambda t: (int(t.group_id), int(t.run_id)))
        path = c.run.batches / f"step_{self.step + 1}.pt"
        save_batch(Batch.from_trajectories(trajectories, c.pad_token_id), path)
        version_before = self.version
        pending = c.trainer.start("train_step", str(path))
        while not pending.done():
            if time.monotonic() > pending.deadline:
                raise ControllerError(
                    f"trainer: train_step {self.step + 1} still running after "
                    f"{c.trainer.timeout_s:g}s (a hung rank?); see logs/driver.log"
                )
            self._service(dispatch=c.policy.dispatch_while_training)
            time.sleep(POLL_S)
        try:
            metrics = pending.result()[0]
        except Exception as exc:
            raise ControllerError(f"trainer: {exc}") from exc
        path.unlink(missing_ok=True)
        t_train = time.perf_counter()
        self.step = int(metrics["trainer/global_step"])
        self.version = int(metrics["trainer/policy_version"])
        row = self._step_row(batch, trajectories, metrics, version_before)
        if "weight/published_version" in metrics:
            row.update(self._sync_weights())
        t_sync = time.perf_counter()
        freq = int(self.cfg.validate.freq)
        if c.val_groups and freq and self.step % freq == 0:
            row.update(self._validate())
        save_freq = int(self.cfg.trainer.save_freq)
        if save_freq and self.step % save_freq == 0:
            t = time.perf_counter()
            self._checkpoint()
            row["timing/checkpoint"] = time.perf_counter() - t
        end = time.perf_counter()
        row.update(
            {
                "timing/wait_batch": t_batch - t0,
                "timing/train": t_train - t_batch,
                "timing/weight_sync": t_sync - t_train,
                "timing/step": end - t0,
                "perf/trajectories_per_s": len(trajectories) / max(end - t0, 1e-9),
            }
        )
        return row

    def _first_copies(self, batch: Any) -> list[Any]:
        """The batch's trajectories minus second copies of a group (a future that Dask
        ran twice committed its group twice): each group is trained from one commit."""
        keep = []
        for traj, (writer, commit, _) in zip(batch.trajectories(), batch.ids, strict=True):
            origin = f"{writer}/{commit}"
            if self.trained.setdefault(int(traj.group_id), origin) == origin:
                keep.append(traj)
        dropped = len(batch) - len(keep)
        if dropped:
            self.counters["duplicate_trajectories_dropped"] += dropped
            logger.warning("dropped %d trajectories of groups already trained", dropped)
        return keep

    def _step_row(
        self, batch: Any, trajectories: list[Any], metrics: dict[str, float], version_before: int
    ) -> dict[str, Any]:
        rewards = np.asarray([t.reward for t in trajectories], dtype=np.float64)
        versions = np.asarray([t.policy_version for t in trajectories])
        row: dict[str, Any] = {
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std()),
            "version/trainer": self.version,
            "version/rollout_min": int(versions.min()),
            "version/rollout_max": int(versions.max()),
            "version/lag_max": int(version_before - versions.min()),
            "rollout/failed_groups": self.counters["failed_groups"],
            "rollout/evaluator_errors": self.counters["evaluator_errors"],
            "rollout/groups_done": self.counters["groups_rolled_out"],
            "pool/delivered_total": self.counters["delivered_trajectories"],
            "inference/restarts": self.counters["inference_restarts"],
            "rollout/duplicate_trajectories_dropped": self.counters[
                "duplicate_trajectories_dropped"
            ],
            "rollout/in_flight": self._c.dispatcher.running_trajectories("train"),
        }
        row.update(batch.metrics())
        for k, v in metrics.items():
            row[f"timing/trainer_{k[7:]}" if k.startswith("timing/") else k] = v
        return row

    # -- rollouts ---------------------------------------------------------------
    def _next_batch(self) -> Any:
        """Top up rollouts and wait until the pool hands out a batch; None when the
        data is exhausted or a stop was asked for."""
        c = self._c
        while self.stop_reason is None:
            self._service(dispatch=True)
            quiet = not c.dispatcher.running("train") and not self._retry
            batch = c.pool.get_batch(current_version=self.version, loaded_batch_finished=quiet)
            if batch is not None:
                return batch
            if quiet and c.loader_done:
                logger.info("data exhausted (data.total_epochs) and the pool has no full batch")
                return None
            c.dispatcher.wait_any(0.2)
        return None

    def _service(self, dispatch: bool) -> None:
        """Harvest finished rollouts, count failures, watch inference, top up."""
        c = self._c
        self._record(c.dispatcher.harvest())
        now = time.monotonic()
        if now - self._last_health >= float(self.cfg.runtime_monitor.health_check_interval_s):
            self._last_health = now
            if c.supervisor.check():
                self.counters["inference_restarts"] += 1
                c.dispatcher.spec = c.dispatcher.spec.with_base_urls(c.supervisor.base_urls)
        if dispatch:
            self._top_up()

    def _record(self, h: Harvest) -> None:
        for g, summary in h.done:
            if g.tag == "train":
                self.counters["groups_rolled_out"] += 1
                self.counters["evaluator_errors"] += summary.evaluator_errors
            else:
                self._val_summaries.append(summary)
        limit = int(self.cfg.runtime_monitor.max_task_failures)
        for g, failure in h.failed:
            self.counters["failed_groups"] += 1
            self._last_failure = failure
            if g.tag == "train":
                tries = self._attempts.get(g.group_id, 0) + 1
                self._attempts[g.group_id] = tries
                if tries <= int(self.cfg.rollout_worker.task_retries):
                    self._retry.append(g.items)
            if self.counters["failed_groups"] > limit:
                raise ControllerError(
                    f"{int(self.counters['failed_groups'])} rollout groups failed (limit "
                    f"runtime_monitor.max_task_failures={limit}); last: {failure.describe()}"
                )

    def _top_up(self) -> None:
        c = self._c
        per_batch = c.groups_per_batch
        target = per_batch * (1 + c.policy.batches_ahead)
        running = len(c.dispatcher.running("train"))
        cap = int(self.cfg.rollout_worker.num_workers)
        if running >= min(target, cap):
            return  # nothing to dispatch: skip reading the pool's stats
        outstanding = running + c.pending_groups()
        while outstanding < target and running < cap:
            if self._retry:
                items = self._retry.pop(0)
            else:
                groups = c.loader.next_batch(1)
                if not groups:
                    c.loader_done = True
                    return
                items = groups[0]
            if int(items[0]["group_id"]) in self._skip:
                continue  # already in the pool (resumed run): never rolled out twice
            c.dispatcher.submit(items)
            outstanding += 1
            running += 1

    # -- weights ----------------------------------------------------------------
    def _sync_weights(self) -> dict[str, float]:
        c = self._c
        out: dict[str, float] = {}
        if c.policy.drain_before_reload:
            t = time.perf_counter()
            self._record(c.dispatcher.drain(float(self.cfg.runtime_monitor.task_timeout_s)))
            out["timing/drain"] = time.perf_counter() - t
        snap = latest_snapshot(c.snapshot_dir)
        if snap is None or snap[0] != self.version:
            raise ControllerError(
                f"trainer reported snapshot v{self.version} but {c.snapshot_dir} has "
                f"{snap[0] if snap else 'none'}"
            )
        out["weight/in_flight_at_reload"] = float(c.dispatcher.running_trajectories("train"))
        c.pool.begin_weight_sync(self.version)
        try:
            out["timing/reload"] = c.supervisor.reload(snap[1], self.version)
        except Exception as exc:
            raise ControllerError(f"inference: {exc}") from exc
        c.pool.end_weight_sync(self.version)
        out["version/inference"] = float(self.version)
        return out

    # -- validation and checkpoints ---------------------------------------------
    def _validate(self) -> dict[str, float]:
        c = self._c
        t = time.perf_counter()
        spec = c.dispatcher.spec.with_sampling(temperature=float(self.cfg.validate.temperature))
        items = [i for g in c.val_groups for i in g]
        for k in range(0, len(items), VAL_ITEMS_PER_TASK):  # few futures: less overhead
            c.dispatcher.submit(
                items[k : k + VAL_ITEMS_PER_TASK], commit=False, spec=spec, tag="val"
            )
        self._val_summaries = []
        failed_before = self.counters["failed_groups"]
        while c.dispatcher.running("val"):
            c.dispatcher.wait_any(0.2)
            self._service(dispatch=False)
        rewards = [r for s in self._val_summaries for r in s.rewards]
        out = {
            "val/reward/mean": float(np.mean(rewards)) if rewards else float("nan"),
            "val/num_samples": float(len(rewards)),
            "val/failed_groups": self.counters["failed_groups"] - failed_before,
            "val/time_s": time.perf_counter() - t,
        }
        c.progress.write(
            f"validation at step {self.step}: reward {out['val/reward/mean']:.3f} "
            f"({len(rewards)} samples)"
        )
        return out

    def _checkpoint(self) -> None:
        c = self._c
        pending = [g.items for g in c.dispatcher.running("train")] + list(self._retry)
        state = ControllerState(
            step=self.step,
            loader=c.loader.state_dict(),
            pool=c.pool.state_dict(),
            pending=pending,
            counters=dict(self.counters),
            trained=dict(self.trained),
        )
        try:
            c.trainer.save_checkpoint(state.to_extra_state())
        except Exception as exc:
            raise ControllerError(f"trainer checkpoint at step {self.step}: {exc}") from exc
        self._last_ckpt_step = self.step
