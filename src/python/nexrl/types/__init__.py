"""Data types shared by every stage: ``Trajectory`` (one sampled response) and ``Batch``."""

from nexrl.types.batch import Batch, BatchError
from nexrl.types.trajectory import Trajectory, TrajectoryError

__all__ = ["Batch", "BatchError", "Trajectory", "TrajectoryError"]
