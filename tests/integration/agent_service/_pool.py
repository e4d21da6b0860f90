"""Read back every trajectory committed to a pool (from disk, as the trainer would)."""

from __future__ import annotations

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.types import Trajectory


def read_pool(store: str | None) -> list[Trajectory]:
    assert store is not None, "this agent service has no pool"
    pool = TrajectoryPool(
        PoolConfig(store=store, batch_readiness="loaded_batch_finished", consumer="test")
    )
    out: list[Trajectory] = []
    while (batch := pool.get_batch(loaded_batch_finished=True)) is not None:
        out.extend(batch.trajectories())
    return out
