"""Checkpoints of an RL run: the trainer's, carrying the controller's state (data and
pool positions, groups in flight, counters; ``nexrl.driver.controller.state``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexrl.driver.controller.errors import ControllerError
from nexrl.driver.controller.state import ControllerState

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components
    from nexrl.driver.controller.counters import RunCounters
    from nexrl.driver.controller.scheduler import RolloutScheduler

__all__ = ["save_checkpoint"]


def save_checkpoint(
    parts: Components,
    scheduler: RolloutScheduler,
    counters: RunCounters,
    step: int,
    row: dict[str, Any] | None = None,
) -> None:
    """A trainer checkpoint at ``step`` with the controller's state; ``row``: the step's
    metrics row when it is not logged yet (a resume logs it if it is missing)."""
    from nexrl.trainer.errors import TrainerGroupError

    pending = scheduler.pending(parts.dispatcher)
    trained, trained_ranges = scheduler.trained.state()
    state = ControllerState(
        step=step,
        loader=parts.loader.state_dict(),
        pool=parts.pool.state_dict(),
        pending=pending,
        counters=counters.to_dict(),
        trained=trained,
        trained_ranges=trained_ranges,
        row=None if row is None else {str(k): float(v) for k, v in row.items()},
    )
    try:
        parts.trainer.save_checkpoint(state.to_extra_state())
    except TrainerGroupError:
        raise  # run() names the ranks and how to resume
    except Exception as exc:
        raise ControllerError(f"trainer checkpoint at step {step}: {exc}") from exc
