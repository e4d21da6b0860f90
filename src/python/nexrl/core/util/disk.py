"""Recognise a full disk behind a failure, and name the path that filled up.

A write that runs out of space surfaces in many shapes: an ``OSError`` with
``errno`` ``ENOSPC`` (``[Errno 28] No space left on device``), the same text inside
another process's error (a trainer rank, a Dask task), or torch's
``PytorchStreamWriter failed writing file ...: file write failed``, which loses the
errno (``file write failed``, ``unexpected pos 61056 vs 60944``). :func:`no_space_left`
takes the failure and the folders the run writes to and returns the path to name
(the file from the error when it has one, else the written folder with the least
free space) or ``None`` when the failure is not a full disk: an error that says so,
or any error while one of those folders has (almost) no space left.
"""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

__all__ = ["free_bytes", "human_bytes", "no_space_left", "says_no_space"]

_NO_SPACE = ("no space left on device", "[errno 28]", "disk quota exceeded", "[errno 122]")
_PATH_IN_TEXT = re.compile(r"(?:No space left on device|Disk quota exceeded): '([^']+)'")
LOW_FREE_BYTES = 1 << 20  # at least this little free space left: a full disk


def says_no_space(text: str) -> bool:
    """True when an error's text says the disk (or the quota) is full."""
    low = text.lower()
    return any(s in low for s in _NO_SPACE)


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of ``path`` (or of its nearest existing parent)."""
    p = Path(path)
    for candidate in (p, *p.parents):
        try:
            return int(shutil.disk_usage(candidate).free)
        except OSError:
            continue
    return None


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def no_space_left(failure: BaseException | str, written: Iterable[str | Path]) -> Path | None:
    """The path to name when ``failure`` is a full disk, else ``None``.

    ``written``: the folders the failed work writes to (the run folder, checkpoints,
    snapshots, the pool); the fullest of them is named when the error names no file.
    """
    chain = _chain(failure) if isinstance(failure, BaseException) else []
    for exc in chain:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            if exc.filename:
                return Path(str(exc.filename))
            return _fullest(written, any_free=True)
    text = " | ".join(str(e) for e in chain) if chain else str(failure)
    if says_no_space(text):
        named = _PATH_IN_TEXT.search(text)
        return Path(named.group(1)) if named else _fullest(written, any_free=True)
    # The errno was lost on the way (torch.save: "file write failed", "unexpected pos
    # 61056 vs 60944"; a library's own error): a failure while a written folder has
    # (almost) no space left is taken for a full disk.
    return _fullest(written, any_free=False)


def _low_free(folder: Path) -> int:
    """Free space below which ``folder``'s file system counts as full: 1 MiB, or 0.5 %
    of its size (a failed large write leaves its partial file behind)."""
    for candidate in (folder, *folder.parents):
        try:
            return max(LOW_FREE_BYTES, shutil.disk_usage(candidate).total // 200)
        except OSError:
            continue
    return LOW_FREE_BYTES


def _fullest(written: Iterable[str | Path], *, any_free: bool) -> Path | None:
    """The folder with the least free space (``any_free``: whatever it has left; else
    only one with less than ``LOW_FREE_BYTES``)."""
    best: tuple[int, Path] | None = None
    for folder in written:
        free = free_bytes(folder)
        if free is None:
            continue
        if best is None or free < best[0]:
            best = (free, Path(folder))
    if best is None:
        return None
    if not any_free and best[0] >= _low_free(best[1]):
        return None
    return best[1]
