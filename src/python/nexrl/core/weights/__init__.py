"""Weight snapshots (for inference) and trainer checkpoints (for resume), both atomic.

Only torch / safetensors are imported here; no training backend.
"""

from nexrl.core.weights.checkpoint import CheckpointError, CheckpointManager, is_complete
from nexrl.core.weights.snapshot import (
    PublishedSnapshot,
    SnapshotError,
    SnapshotPublisher,
    latest_snapshot,
    list_snapshots,
    read_version,
)

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "PublishedSnapshot",
    "SnapshotError",
    "SnapshotPublisher",
    "is_complete",
    "latest_snapshot",
    "list_snapshots",
    "read_version",
]
