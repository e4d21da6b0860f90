"""What a rollout worker reads from the pool's weight-sync record to tag its replies
(``pool_versions``: the version loaded everywhere, read when a request starts, and the
newest one a replica may serve, read when the reply arrives), against a real pool that
the controller's calls move through a sync."""

from __future__ import annotations

from pathlib import Path

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.rollout.worker.tasks import pool_versions


def test_a_sync_in_progress_moves_only_the_newest(tmp_path: Path) -> None:
    cfg = PoolConfig(store=str(tmp_path / "pool.zarr"))
    pool = TrajectoryPool(cfg)
    loaded, newest = pool_versions(cfg)
    assert (loaded(), newest()) == (None, None)  # nothing loaded yet
    pool.end_weight_sync(3)
    assert (loaded(), newest()) == (3, 3)
    pool.begin_weight_sync(4)  # the engine may serve v4 from here on
    assert (loaded(), newest()) == (3, 4)
    pool.end_weight_sync(4)
    assert (loaded(), newest()) == (4, 4)


def test_both_versions_go_through_the_pool(tmp_path: Path) -> None:
    from nexrl.core.types.trajectory import Trajectory

    def traj(g: int, first: int, last: int | None) -> Trajectory:
        return Trajectory(
            prompt_ids=[1, 2],
            response_ids=[3],
            loss_mask=[1],
            logprobs=[-0.5],
            reward=1.0,
            group_id=g,
            policy_version=first,
            policy_version_last=last,
        )

    pool = TrajectoryPool(PoolConfig(store=str(tmp_path / "pool.zarr"), batch_size=2))
    pool.writer().append([traj(0, 2, 4), traj(1, 3, None)])
    batch = pool.get_batch()
    assert batch is not None
    assert batch.columns.policy_version.tolist() == [2, 3]
    assert batch.columns.policy_version_last.tolist() == [4, 3]  # None: one version
    assert [t.policy_version_last for t in batch.trajectories()] == [4, 3]
