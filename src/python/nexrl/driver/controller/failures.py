"""A group that failed for good, and the warning lines failures make: one line per failed
future and error, naming its groups as ranges."""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["TaskFailure", "id_list", "warn_failures"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskFailure:
    """A group that failed for good (after its task's retries)."""

    component: str  # "rollout" or "evaluator"
    key: str
    group_id: int
    tag: str
    error: str

    def describe(self) -> str:
        return f"{self.component} future {self.key} (group {self.group_id}): {self.error}"


def warn_failures(failures: list[TaskFailure]) -> None:
    """One warning line per failed future and error: a task of 8 groups that timed out
    is one line naming its 8 groups, not 8 lines."""
    by_cause: dict[tuple[str, str, str], list[int]] = {}
    for f in failures:
        by_cause.setdefault((f.component, f.key, f.error), []).append(f.group_id)
    for (component, key, error), groups in by_cause.items():
        which = f"group {groups[0]}" if len(groups) == 1 else f"groups {id_list(groups)}"
        logger.warning("%s future %s (%s): %s", component, key, which, error)


def id_list(ids: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5, 9``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
