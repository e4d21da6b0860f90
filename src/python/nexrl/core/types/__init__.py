"""Data types shared by every stage: ``Trajectory`` (one sampled response) and ``Batch``.

``Batch`` (torch tensors) is imported on first use, so rollout and pool
processes that only handle trajectories never pay for importing torch.
"""

from typing import TYPE_CHECKING

from nexrl.core.types.trajectory import Trajectory, TrajectoryError
from nexrl.core.util.lazy import lazy_names

if TYPE_CHECKING:
    from nexrl.core.types.batch import Batch, BatchError

__all__ = ["Batch", "BatchError", "Trajectory", "TrajectoryError"]


__getattr__ = lazy_names(__name__, {"Batch": "batch", "BatchError": "batch"})
