"""What a run ends with: ``RunResult`` when it ends, ``ControllerError`` when it stops on
an error (raised by the RL loop and by ``sft`` alike)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexrl.core.errors import NexrlError

__all__ = ["ControllerError", "RunResult"]


class ControllerError(RuntimeError, NexrlError):
    """The run stopped on an error; the message names the failing component."""


@dataclass
class RunResult:
    steps: int
    output_dir: Path
    stopped_by: str | None
    summary: str
