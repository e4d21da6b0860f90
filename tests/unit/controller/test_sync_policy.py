"""Weight-sync modes: how far rollouts run ahead and when inference reloads."""

from __future__ import annotations

import pytest

from nexrl.driver.controller.sync import SyncPolicy


def test_sync_never_runs_ahead_and_never_drains() -> None:
    p = SyncPolicy("sync", staleness_threshold=3)
    assert (p.batches_ahead, p.dispatch_while_training, p.drain_before_reload) == (0, False, False)
    assert p.batches_dispatched == 1  # the next batch, while the trainer is idle
    assert p.max_staleness is None


@pytest.mark.parametrize(("threshold", "ahead"), [(None, 1), (0, 0), (2, 2)])
def test_fully_async_runs_ahead_by_the_threshold(threshold: int | None, ahead: int) -> None:
    p = SyncPolicy("fully-async", staleness_threshold=threshold)
    assert p.batches_ahead == ahead
    assert p.batches_dispatched == max(1, ahead)
    assert p.dispatch_while_training and not p.drain_before_reload
    assert p.max_staleness == threshold


def test_batch_async_drains_before_each_reload() -> None:
    p = SyncPolicy("batch-async", staleness_threshold=1)
    assert (p.batches_ahead, p.dispatch_while_training, p.drain_before_reload) == (1, True, True)
    # one step off: only the next batch is sampled while the current one trains
    assert p.batches_dispatched == 1
    assert p.max_staleness == 1
