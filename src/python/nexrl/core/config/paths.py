"""Where a recipe path (a data file, a user's Python file) is found."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["did_you_mean_path", "expand_pattern", "is_pattern", "resolve_path"]


def is_pattern(value: str) -> bool:
    """A path with ``*``, ``?`` or ``[...]``: a pattern that names files (``data/*.jsonl``)."""
    return any(c in value for c in "*?[")


def expand_pattern(value: str, roots: Sequence[Path]) -> list[str]:
    """The files pattern ``value`` names, sorted, as absolute paths: looked up as a
    relative path is (the first of ``roots`` where it matches anything); ``[]`` when it
    matches no file. ``**`` matches any folders below."""
    p = Path(value).expanduser()
    if p.is_absolute():
        bases, rel = [Path(p.anchor)], str(p.relative_to(p.anchor))
    else:
        bases, rel = list(roots), str(p)
    for base in bases:
        found = sorted(str(m.resolve()) for m in base.glob(rel) if m.is_file())
        if found:
            return found
    return []


def resolve_path(value: str, roots: Sequence[Path]) -> Path | None:
    """The first existing ``roots[i] / value`` (or ``value`` itself when absolute)."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for root in roots:
        if (root / p).exists():
            return (root / p).resolve()
    return None


def close_path(value: str, roots: Sequence[Path]) -> str | None:
    """An existing path that ``value`` (which does not exist) is probably a misspelling
    of, written as ``value`` is (relative stays relative): each part of ``value`` that
    does not exist is replaced by the closest name in its folder; None when some part
    has no close name, or nothing needed replacing."""
    p = Path(value).expanduser()
    bases = [Path(p.parts[0])] if p.is_absolute() else list(roots)
    parts = p.parts[1:] if p.is_absolute() else p.parts
    for base in bases:
        here, changed = base, False
        fixed: list[str] = []
        for part in parts:
            if (here / part).exists():
                here, fixed = here / part, [*fixed, part]
                continue
            try:
                names = sorted(entry.name for entry in here.iterdir())
            except OSError:
                break
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.75)
            if not close:
                break
            here, fixed, changed = here / close[0], [*fixed, close[0]], True
        else:
            if changed:
                return str(Path(p.parts[0], *fixed)) if p.is_absolute() else str(Path(*fixed))
    return None


def did_you_mean_path(value: str, roots: Sequence[Path]) -> str:
    """``"; did you mean 'x'?"`` for a misspelt path (``close_path``), else ``""``."""
    close = close_path(value, roots)
    return f"; did you mean '{close}'?" if close else ""
