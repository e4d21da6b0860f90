"""Where a recipe path (a data file, a user's Python file) is found."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["resolve_path"]


def resolve_path(value: str, roots: Sequence[Path]) -> Path | None:
    """The first existing ``roots[i] / value`` (or ``value`` itself when absolute)."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for root in roots:
        if (root / p).exists():
            return (root / p).resolve()
    return None
