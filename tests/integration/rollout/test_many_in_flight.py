"""Many rollout workers and many groups in flight: every group reaches a batch exactly
once and none is lost.

The controller's loop (``tests/_control_plane.py``: scheduler, dispatcher, the zarr
pool's batches) on a real ``LocalCluster`` of 4 worker processes, against the
stand-in engine (``tests/_standin_engine.py``: a real HTTP server on 127.0.0.1 with
no model, answering at once through the real openai client), one epoch of the
default recipe's 210 prompts with 96 groups in flight in tasks of 4. What the
control-plane benchmark measures at scale (``test_bench_control_plane.py``), checked
for behaviour only: no timing is asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.pool import TrajectoryPool
from tests._control_plane import PlaneSettings, drive_plane, plane_cluster, plane_pool, plane_spec
from tests._standin_engine import StandinSettings, start_standin_engine

NAME = "standin"
PROMPTS = 210  # recipes/max_digit/data/train.jsonl


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    server = start_standin_engine(StandinSettings(NAME))
    yield server
    server.stop()


def test_every_group_of_an_epoch_is_trained_once(engine: Any, tmp_path: Path) -> None:
    s = PlaneSettings(
        in_flight=96,
        groups_per_task=4,
        batch_groups=10,  # 21 batches of the epoch's 210 groups
        warmup_groups=10,
        measured_groups=PROMPTS - 10,
        total_epochs=1,
    )
    pool_cfg = plane_pool(tmp_path / "pool.zarr", s)
    with plane_cluster(4, threads_per_worker=2) as client:
        run = drive_plane(client, plane_spec(engine.base_url, NAME, pool_cfg, 1), s, tmp_path)
    assert run.failed_groups == 0
    assert sorted(run.group_ids) == list(range(PROMPTS))  # each group once, none lost
    stats = TrajectoryPool(pool_cfg).stats()
    assert stats.committed == PROMPTS * s.group_size  # and committed once
    assert stats.pending == 0
