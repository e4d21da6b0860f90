"""Starting where a run left off: a finished run only shows its summary again; a
resumed one gets its data and pool positions, counters and in-flight groups back from
the checkpoint the trainer resumed from, and says what changed."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from nexrl.driver.controller.driver_log import DETAILS_LOGGER
from nexrl.driver.controller.errors import ControllerError, RunResult
from nexrl.driver.controller.state import ControllerState, committed_group_ids
from nexrl.trainer.rank_calls import RankCall

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.counters import RunCounters
    from nexrl.driver.controller.scheduler import RolloutScheduler
    from nexrl.driver.recipe import Recipe

__all__ = ["finished_run", "restore_state", "say_resumed"]

logger = logging.getLogger(
    "nexrl.driver.controller.loop"
)  # the controller's log lines keep one name


def finished_run(recipe: Recipe) -> RunResult | None:
    """A rerun of a finished run: no cluster is started, the run's summary is shown
    again (from metrics.jsonl) with how to train on; None for a run not finished."""
    from nexrl.driver.controller.rundir import RunDir
    from nexrl.driver.metrics import format_summary, read_metrics, summarize

    run = RunDir(recipe.output_dir)
    line = run.finished(recipe)
    if line is None:
        return None
    step = run.checkpoint_step()
    rows = read_metrics(run.metrics) if run.metrics.exists() else []
    summary = format_summary(summarize(rows))
    # (not summarize's evaluator_error_share: a step without errors may lack the metric)
    shares = [r.get("eval/evaluator_error") for r in rows if "reward/mean" in r]
    if shares and all(share == 1.0 for share in shares):  # as check_finished() judged
        raise ControllerError(
            f"{run.root} finished at step {step} having trained on "
            "nothing but evaluator errors (eval/evaluator_error 1.0 at every step; see "
            f"logs/dask-worker-*.log); fix the evaluator and start a new run with "
            f"{recipe.new_run_advice()}"
        )
    print(f"{line}\n{summary}", file=sys.stderr, flush=True)
    return RunResult(step, run.root, None, summary)


def restore_state(
    parts: Components,
    recipe: Recipe,
    info: dict[str, Any],
    counters: RunCounters,
    scheduler: RolloutScheduler,
    step: int,
) -> ControllerState | None:
    """Put the controller's state saved with the checkpoint the trainer resumed from
    (``info``: rank 0's setup) back: the loader's, the pool's, ``counters`` and the
    ``scheduler``'s; None on a fresh run (its config is recorded)."""
    if not info.get("resumed_from"):
        parts.run.record_config(recipe)
        return None
    extra = parts.trainer.call(RankCall.EXTRA_STATE)[0]
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
                f"{recipe.spec.trajectory_pool.store} ({exc}): was it deleted, moved or "
                "replaced since? Put the run's pool back there (trajectory_pool.store), "
                "or start a new run in another output_dir"
            ) from exc
    counters.restore(state.counters)
    scheduler.restore(
        state.pending, state.trained, committed_group_ids(parts.pool), state.trained_ranges
    )
    if state.row is not None:  # killed after the checkpoint, before its row was logged
        parts.tracker.restore(step, state.row)
    return state


def say_resumed(
    parts: Components,
    recipe: Recipe,
    info: dict[str, Any],
    state: ControllerState,
    step: int,
    version: int,
    skipped: int,
) -> None:
    """The notes of a resume (a checkpoint passed over, the LR schedule moved, the
    settings changed; ``config.yaml`` records the new ones) and its log line."""
    if info.get("resume_note"):  # a corrupted checkpoint or snapshot was passed over
        parts.progress.warn(info["resume_note"])
    if info.get("schedule_note"):  # the resumed recipe moved the LR schedule's end
        parts.progress.warn(info["schedule_note"])
    _record_changes(parts, parts.run.record_config(recipe))
    parts.progress.write(f"nexrl: resumed at step {step} from {info['resumed_from']}")
    logger.info(
        "resumed from %s at step %d (policy v%d); %d groups were in flight, %d groups "
        "already in the pool are not rolled out again",
        info["resumed_from"],
        step,
        version,
        len(state.pending),
        skipped,
    )


def _record_changes(parts: Components, changes: list[str], shown: int = 8) -> None:
    """Say which settings a resume changed (config.yaml now records the new ones)."""
    if not changes:
        return
    more = f"; and {len(changes) - shown} more" if len(changes) > shown else ""
    parts.progress.write(
        f"nexrl: resumed with {len(changes)} changed setting(s) (config.yaml records "
        f"them now): {'; '.join(changes[:shown])}{more}"
    )
    details = logging.getLogger(DETAILS_LOGGER)  # every one, in logs/driver.log only
    details.info("settings changed on resume:\n  %s", "\n  ".join(changes))
