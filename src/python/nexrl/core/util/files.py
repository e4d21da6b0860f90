"""Atomic, durable file-system steps (files, symlinks, directories).

The pattern every writer here follows: write into a temporary name in the same
folder (so on the same file system), optionally ``fsync`` the data, then
``rename`` over the final name (POSIX ``rename`` is atomic: a reader sees the
old entry or the new one, never a mixture), optionally ``fsync`` the folder so
the new name survives a machine crash. A writer that fails removes its
temporary entry; a killed one leaves at worst a stray hidden ``.NAME.tmp-*``
entry, never a half-written ``NAME``.

``fsync`` (the data) and ``fsync_parent`` (the folder entry) are separate
choices: a file that only has to be whole (a plot, a summary) skips both; a
file that has to survive a power loss (weights metadata, consumer cursors)
pays for them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "atomic_symlink",
    "atomic_write_bytes",
    "atomic_write_text",
    "fsync_dir",
    "fsync_file",
    "fsync_tree",
    "io_pool",
    "is_temp_name",
    "remove_tree",
    "replace_dir",
    "start_writeback",
]


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The process's shared threads for blocking file work (fsyncs, hashing files):
    started once, instead of a pool per call (on the 2-core VM a fresh pool of 9
    threads cost ~2-3 ms per publish of the default recipe's snapshot, more than the
    9 fsyncs themselves). Only for tasks that submit nothing to it themselves."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="nexrl-io")
        return _IO_POOL


def _forget_io_pool() -> None:
    """In a forked child: the parent's I/O threads do not exist there, and its pool
    would queue work for them forever; the child starts its own on first use."""
    global _IO_POOL, _IO_POOL_LOCK
    _IO_POOL, _IO_POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_io_pool)


def fsync_file(path: str | Path) -> None:
    """Flush ``path``'s data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range, do not wait
_libc_sync_file_range: Any = None


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``nbytes`` at ``offset`` of ``fd`` to disk now,
    without waiting (Linux ``sync_file_range(..., SYNC_FILE_RANGE_WRITE)``; the os
    module has no binding), so that a later ``fsync`` waits only for the last pieces
    instead of the whole file: 256 MiB written, hashed and fsynced on this project's
    2-core VM in a median 0.24-0.27 s instead of 0.35-0.40 s (docs/benchmarks.md).
    Durability still comes from ``fsync``
    alone; where the call is missing or refused (another OS, a pipe) nothing happens.
    """
    global _libc_sync_file_range
    if _libc_sync_file_range is None:
        _libc_sync_file_range = False
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            except (AttributeError, OSError):
                pass
            else:
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _libc_sync_file_range = fn
    if _libc_sync_file_range:
        _libc_sync_file_range(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)  # advisory: -1 is fine


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
        list(io_pool().map(fsync_file, files))
    elif files:
        fsync_file(files[0])
    for folder in reversed(folders):
        fsync_dir(folder)
    return total


_TEMP_RE = re.compile(r"^\..+\.tmp-[0-9a-f]{32}$")


def _temp_name(path: str) -> str:
    """A fresh hidden name next to ``path`` (unique across processes and threads)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex}")


def is_temp_name(name: str) -> bool:
    """True for the temporary name of an atomic write here (``.NAME.tmp-<uuid hex>``):
    one a killed writer left behind, safe to remove for the folder's only writer."""
    return bool(_TEMP_RE.match(name))


def _discard(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def atomic_write_bytes(
    path: str | Path,
    data: bytes,
    *,
    fsync: bool = True,
    fsync_parent: bool = True,
    exclusive: bool = False,
    mode: int = 0o666,
) -> bool:
    """Replace ``path`` with ``data`` atomically; its folder must exist.

    ``fsync`` flushes the data before the rename, ``fsync_parent`` the folder
    after it. With ``exclusive`` the name must not exist yet: the file is
    published with ``os.link`` (atomic, and fails if the name exists) and
    False is returned when it already existed (nothing is changed then).
    ``mode`` is the new file's permission bits before the umask (as ``open``).
    """
    path = os.fspath(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        if exc.filename is None and exc.errno is not None:  # a failed write() names no file
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise
    except BaseException:
        _discard(tmp)
        raise
    if fsync_parent:
        fsync_dir(os.path.dirname(path) or ".")
    return True


def atomic_write_text(
    path: str | Path,
    text: str,
    *,
    encoding: str = "utf-8",
    fsync: bool = True,
    fsync_parent: bool = True,
) -> None:
    """:func:`atomic_write_bytes` for ``text`` encoded with ``encoding``."""
    atomic_write_bytes(path, text.encode(encoding), fsync=fsync, fsync_parent=fsync_parent)


@contextlib.contextmanager
def atomic_path(
    path: str | Path, *, fsync: bool = True, fsync_parent: bool = True
) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for the block to create; when the block
    ends normally the temporary entry replaces ``path`` atomically, when it raises the
    temporary entry is removed and ``path`` is left as it was.

    For writers that want a path rather than bytes (``savefig``, ``os.symlink``).
    ``fsync`` flushes a regular file's data before the rename, ``fsync_parent`` the
    folder after it.
    """
    target = os.fspath(path)
    tmp = _temp_name(target)
    try:
        yield Path(tmp)
        if fsync:
            fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        _discard(tmp)
        raise
    if fsync_parent:
        fsync_dir(os.path.dirname(target) or ".")


def atomic_symlink(target: str, link: str | Path) -> None:
    """Point the symlink ``link`` at ``target`` atomically (new link + rename over)."""
    with atomic_path(link, fsync=False) as tmp:
        os.symlink(target, tmp)


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
