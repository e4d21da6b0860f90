"""Small control files (commit markers, consumer cursors, flags) next to the zarr data.

Every file here is written *once, whole*: on a local (or NFS/GPFS) path the bytes
go to a temporary file in the same folder, are fsync'ed, then renamed into place
(``os.link`` when the name must not exist yet, ``os.replace`` otherwise), so a
reader sees the old file, the new file or no file, never a torn one. On object
storage (any other fsspec URL) one ``PUT`` of the whole object is atomic by the
store's own guarantee.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Protocol

from nexrl.core.util.files import atomic_write_bytes

__all__ = ["FsspecKV", "KVStore", "LocalKV", "is_local", "local_path", "open_kv"]


class KVStore(Protocol):
    """Whole-object reads and atomic whole-object writes under one root."""

    def put(self, key: str, data: bytes, *, exclusive: bool = False, fsync: bool = True) -> bool:
        """Write ``data`` atomically; with ``exclusive`` return False if ``key`` exists.
        ``fsync`` also makes it durable across a machine crash (local file systems)."""
        ...

    def get(self, key: str) -> bytes | None:
        """The bytes of ``key``, or None when it does not exist."""
        ...

    def listdir(self, prefix: str) -> list[str]:
        """Names (not paths) directly under the folder ``prefix``; [] when absent."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        ...

    def put_many(self, items: dict[str, bytes], *, fsync: bool = False) -> None:
        """Write several objects, each whole (data chunks that only a later commit marker
        makes reachable)."""
        ...

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        """The objects among ``keys`` that exist."""
        ...


def is_local(url: str) -> bool:
    """True for a plain path or a ``file://`` URL."""
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> Path:
    return Path(url[len("file://") :] if url.startswith("file://") else url).expanduser()


class LocalKV:
    """``KVStore`` on a local or network-mounted POSIX file system."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._dirs: set[str] = set()  # folders known to exist (put_many)

    def _path(self, key: str) -> Path:
        return self.root / key

    def put(self, key: str, data: bytes, *, exclusive: bool = False, fsync: bool = True) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_bytes(
            path, data, fsync=fsync, fsync_parent=False, exclusive=exclusive, mode=0o644
        )

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(self._path(prefix))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if not n.startswith("."))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def put_many(self, items: dict[str, bytes], *, fsync: bool = False) -> None:
        root = str(self.root)
        for key, data in items.items():
            folder = key.rpartition("/")[0]
            if folder not in self._dirs:
                os.makedirs(os.path.join(root, folder), exist_ok=True)
                self._dirs.add(folder)
            atomic_write_bytes(os.path.join(root, key), data, fsync=fsync, fsync_parent=False)

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for key in keys:
            try:
                with open(self._path(key), "rb") as f:
                    out[key] = f.read()
            except FileNotFoundError:
                pass
        return out


class FsspecKV:
    """``KVStore`` on any fsspec file system (object storage: one PUT per object)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        from fsspec.core import url_to_fs

        self.fs, root = url_to_fs(url, **(storage_options or {}))
        self.root = root.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def put(self, key: str, data: bytes, *, exclusive: bool = False, fsync: bool = True) -> bool:
        path = self._path(key)
        # Object stores have no portable create-if-absent; the check narrows the
        # window and the single PUT keeps the object whole.
        if exclusive and self.fs.exists(path):
            return False
        self.fs.pipe_file(path, data)
        return True

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, prefix: str) -> list[str]:
        try:
            entries = self.fs.ls(self._path(prefix), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return sorted(n for n in names if n and not n.startswith("."))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    def put_many(self, items: dict[str, bytes], *, fsync: bool = False) -> None:
        if items:  # concurrent PUTs on async file systems
            self.fs.pipe({self._path(k): v for k, v in items.items()})

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        paths = {self._path(k): k for k in keys}
        got = self.fs.cat(list(paths), on_error="omit")
        if not isinstance(got, dict):  # a single path returns bytes
            got = {next(iter(paths)): got}
        return {paths[p]: bytes(v) for p, v in got.items() if p in paths}


def open_kv(url: str, storage_options: dict[str, Any] | None = None) -> KVStore:
    """The ``KVStore`` for a pool URL (local path or fsspec URL)."""
    if is_local(url):
        return LocalKV(local_path(url))
    return FsspecKV(url, storage_options)
