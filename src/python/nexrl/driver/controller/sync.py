"""Weight-sync modes (``weight.sync_mode``): how far rollouts may run ahead of training
and whether inference reloads with rollouts in flight.

=============  =====================================  ==============================
mode           rollouts dispatched ahead               at each published snapshot
=============  =====================================  ==============================
sync           one batch, only while training is idle  reload (nothing is in flight)
batch-async    ``staleness_threshold`` batches (at     stop dispatching, let in-flight
               least 1), also while the trainer        rollouts finish, reload, go on
               trains
fully-async    ``staleness_threshold`` batches (1      reload at once, rollouts keep
               when unset), continuously               running; each request is served
                                                       by whatever weights are loaded
=============  =====================================  ==============================

"Ahead" counts groups running or waiting in the pool, besides the batch the
trainer is training on: with ``staleness_threshold: 1`` the next batch is sampled
while the current one trains (one step off). Dispatching a second batch then
would only make the two share the inference service, and batch-async's drain
wait for both (measured: 1.57 s vs 2.2 s a step, docs/benchmarks.md).

In every mode each trajectory records the policy version that generated it
(the inference service reports it), the pool can drop groups older than
``trajectory_pool.max_staleness`` (``staleness_threshold`` is applied there
when unset), and every step logs ``version/rollout_min``/``version/lag_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SyncPolicy"]


@dataclass(frozen=True)
class SyncPolicy:
    mode: str
    staleness_threshold: int | None = None

    @property
    def batches_ahead(self) -> int:
        """Batches of rollouts allowed in flight or waiting in the pool, beyond the next."""
        if self.mode == "sync":
            return 0
        return self.staleness_threshold if self.staleness_threshold is not None else 1

    @property
    def batches_dispatched(self) -> int:
        """Batches of groups the scheduler keeps running or waiting in the pool."""
        return max(1, self.batches_ahead)

    @property
    def dispatch_while_training(self) -> bool:
        return self.mode != "sync"

    @property
    def retries_hold_their_place(self) -> bool:
        """A group waiting for its retry counts toward the step's groups (no new one is
        sent meanwhile): sync mode's batch is the groups sent for it, on its weights."""
        return self.mode == "sync"

    @property
    def drain_before_reload(self) -> bool:
        return self.mode == "batch-async"

    @property
    def max_staleness(self) -> int | None:
        """The pool's staleness filter this mode implies (None = keep everything)."""
        if self.mode == "sync":
            return None
        return self.staleness_threshold
