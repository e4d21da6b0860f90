"""How many torch threads a CPU process of a run may use."""

from __future__ import annotations

import os

__all__ = ["cpu_threads"]


def cpu_threads(local_world_size: int, configured: int = 0) -> int:
    """Torch threads of a CPU trainer rank: ``configured`` (``trainer.cpu_threads``)
    when set, else half the machine's cores shared among the ranks on it (at least 1).
    The other half is left to inference and rollouts; more threads than free cores
    makes OpenMP spin-wait, which measured 10-20x slower steps on a 2-core machine
    while the server generated beside the trainer (docs/benchmarks.md)."""
    if configured > 0:
        return configured
    return max(1, (os.cpu_count() or 1) // (2 * max(1, local_world_size)))
