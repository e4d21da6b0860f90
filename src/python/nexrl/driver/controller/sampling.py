"""Dynamic sampling (``algorithm.filter_zero_variance_groups``): the pool drops groups
whose rewards are all equal; this counts them per step, says when a step takes a short
batch (its ``algorithm.max_extra_sampling_rounds`` used up), and stops a run whose
evaluator filters everything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexrl.driver.controller.errors import ControllerError

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components

__all__ = ["FilterCount"]


class FilterCount:
    """Groups the pool's filter dropped, counted from ``mark`` (the count at the last
    batch; ``start`` sets it for a run)."""

    def __init__(self, max_extra_sampling_rounds: int) -> None:
        self.rounds = max_extra_sampling_rounds
        self.mark = 0

    def start(self, pool: Any) -> None:
        self.mark = self.total(pool)

    @staticmethod
    def total(pool: Any) -> int:
        """Groups the pool's filter dropped so far (its cursor's counter)."""
        return int(pool.cursor.counters.get("filtered_groups", 0))

    def since_mark(self, pool: Any) -> int:
        return self.total(pool) - self.mark

    def take(self, pool: Any) -> int:
        """The groups filtered for this step's batch; the next step counts from here."""
        filtered = self.since_mark(pool)
        self.mark += filtered
        return filtered

    def short_batch_floor(self, parts: Components) -> int | None:
        """``min_trajectories`` for the pool: 1 once this step's extra sampling rounds
        are used up (take what is ready), else None (a full batch)."""
        if not parts.pool.config.filter_zero_variance:
            return None
        cap = self.rounds * parts.groups_per_batch
        return 1 if self.since_mark(parts.pool) >= cap else None

    def check_not_all_filtered(self, parts: Components, step: int, first_step: int) -> None:
        """Dynamic sampling that finds no informative group at all (an evaluator that gives
        every answer the same reward) would roll out forever: once eight times the extra
        rounds' worth of groups were filtered for this command's first step and not one
        group was kept, stop. Later (a policy that answers almost every prompt alike) the
        step keeps waiting for an informative group, and the wait notice says so."""
        if not parts.pool.config.filter_zero_variance or step > first_step:
            return
        rounds = self.rounds
        limit = 8 * max(rounds, 1) * parts.groups_per_batch
        filtered = self.since_mark(parts.pool)
        if filtered >= limit:
            raise ControllerError(
                f"dynamic sampling: step {step + 1} found no group with different "
                f"rewards in {filtered} groups rolled out (all were filtered as zero-variance: "
                "algorithm.filter_zero_variance_groups); check that the evaluator does not "
                "give every answer the same reward (or, on a resumed run, that the policy "
                "has not converged), or raise "
                f"algorithm.max_extra_sampling_rounds (now {rounds}) for a task whose "
                "informative groups are rare"
            )
