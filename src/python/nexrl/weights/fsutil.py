"""Durable, atomic file-system steps shared by snapshots and checkpoints.

The pattern every writer here follows: write into a temporary name on the
same file system, ``fsync`` the data and the directory, then ``rename`` (POSIX
``rename`` is atomic: a reader sees the old entry or the new one, never a
mixture). A crash at any point leaves at worst a stray temporary entry, which
the next writer removes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = [
    "atomic_symlink",
    "atomic_write_bytes",
    "fsync_dir",
    "fsync_file",
    "fsync_tree",
    "remove_tree",
    "replace_dir",
]


def fsync_file(path: str | Path) -> None:
    """Flush ``path``'s data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Flush a directory's entries (new names, renames) to stable storage."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # platforms without directory fds: nothing more to do
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> int:
    """``fsync`` every regular file and directory under ``root``; returns the bytes seen.

    The files are flushed concurrently (a journaling file system then commits
    them together instead of once per file), the directories after them.
    """
    files, folders, total = [], [], 0
    for folder, _dirs, names in os.walk(root):
        folders.append(folder)
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                total += os.path.getsize(path)
                files.append(path)
    if len(files) > 1:
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            list(pool.map(fsync_file, files))
    elif files:
        fsync_file(files[0])
    for folder in reversed(folders):
        fsync_dir(folder)
    return total


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def atomic_symlink(target: str, link: str | Path) -> None:
    """Point the symlink ``link`` at ``target`` atomically (new link + rename over)."""
    link = Path(link)
    tmp = link.with_name(f".{link.name}.tmp-{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(link.parent)


def remove_tree(path: str | Path) -> None:
    """Delete a directory tree (or file/link) if it exists."""
    p = Path(path)
    if p.is_symlink() or p.is_file():
        p.unlink(missing_ok=True)
    elif p.exists():
        shutil.rmtree(p, ignore_errors=True)


def replace_dir(src: str | Path, dst: str | Path) -> None:
    """Move the finished directory ``src`` to ``dst`` (replacing an existing ``dst``).

    A fresh ``dst`` appears in one ``rename``. An existing ``dst`` is first
    renamed aside, so ``dst`` is missing (never partial) for the instant in
    between, then deleted.
    """
    src, dst = Path(src), Path(dst)
    trash: Path | None = None
    if dst.exists() or dst.is_symlink():
        trash = dst.with_name(f".trash-{dst.name}-{uuid.uuid4().hex[:8]}")
        os.rename(dst, trash)
    os.rename(src, dst)
    fsync_dir(dst.parent)
    if trash is not None:
        remove_tree(trash)
