"""The trajectory pool: a zarr v3 store where rollouts and the trainer meet.

* ``PoolWriter`` / ``get_writer``: append trajectories from any process (rollout
  tasks on Dask workers); each append becomes visible atomically.
* ``TrajectoryPool``: the consumer side: grouped, exactly-once batches with a
  durable cursor, group timeouts, staleness filter/metrics, weight-sync tags,
  ``stats()`` and a lazy ``to_xarray()`` view.
* ``read_pool(path)``: a run's pool as that view, read only (for analysis);
  ``read_traces(path)``: its agent traces, in the same order.

Layout and guarantees: docs/pool.md.
"""

from nexrl.core.pool.batch import PoolBatch, PoolStats
from nexrl.core.pool.columns import PoolDataError, TrajectoryColumns
from nexrl.core.pool.commits import CommitMarker
from nexrl.core.pool.config import PoolConfig
from nexrl.core.pool.cursor import ConsumerConflictError
from nexrl.core.pool.layout import Chunking, PoolStoreError
from nexrl.core.pool.pool import PoolConfigError, TrajectoryPool
from nexrl.core.pool.rows import PoolRows
from nexrl.core.pool.view import read_pool, read_traces
from nexrl.core.pool.writer import PoolWriter, get_writer

__all__ = [
    "Chunking",
    "CommitMarker",
    "ConsumerConflictError",
    "PoolBatch",
    "PoolConfig",
    "PoolConfigError",
    "PoolDataError",
    "PoolRows",
    "PoolStats",
    "PoolStoreError",
    "PoolWriter",
    "TrajectoryColumns",
    "TrajectoryPool",
    "get_writer",
    "read_pool",
    "read_traces",
]
