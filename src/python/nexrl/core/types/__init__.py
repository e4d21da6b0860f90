"""Data types shared by every stage: ``Trajectory`` (one sampled response) and ``Batch``.

``Batch`` (torch tensors) is imported on first use, so rollout and pool
processes that only handle trajectories never pay for importing torch.
"""

from typing import TYPE_CHECKING, Any

from nexrl.core.types.trajectory import Trajectory, TrajectoryError

if TYPE_CHECKING:
    from nexrl.core.types.batch import Batch, BatchError

__all__ = ["Batch", "BatchError", "Trajectory", "TrajectoryError"]


def __getattr__(name: str) -> Any:
    if name in ("Batch", "BatchError"):
        from nexrl.core.types import batch

        return getattr(batch, name)
    raise AttributeError(f"module 'nexrl.core.types' has no attribute {name!r}")
