"""Reading a snapshot root (layout: ``nexrl.core.weights.snapshot``): the complete
snapshots, the one ``latest`` names, a snapshot checked against its checksums."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from nexrl.core.errors import NexrlError
from nexrl.core.util.checksums import check_tree

__all__ = [
    "CHECKSUMS_FILE",
    "LATEST_NAME",
    "VERSION_FILE",
    "SnapshotError",
    "latest_snapshot",
    "list_snapshots",
    "read_version",
    "verify_snapshot",
    "wait_for_snapshot",
]

LATEST_NAME = "latest"
VERSION_FILE = "version"
CHECKSUMS_FILE = "checksums.json"
_SNAPSHOT_RE = re.compile(r"^v(\d+)$")


class SnapshotError(RuntimeError, NexrlError):
    """A snapshot could not be published or read; the message names the path."""


def read_version(path: str | Path) -> int | None:
    """The version in ``path/version``; ``None`` when missing or unreadable (incomplete)."""
    try:
        return int((Path(path) / VERSION_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def list_snapshots(root: str | Path) -> list[tuple[int, Path]]:
    """Complete snapshots ``(version, path)`` under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        m = _SNAPSHOT_RE.match(entry.name)
        if (
            m
            and entry.is_dir()
            and not entry.is_symlink()
            and read_version(entry) == int(m.group(1))
        ):
            found.append((int(m.group(1)), entry))
    return sorted(found)


def verify_snapshot(path: str | Path) -> str | None:
    """``None`` when ``path`` is complete and its files match ``checksums.json`` (or it
    has none: published before checksums were recorded); else one line saying why not."""
    path = Path(path)
    if read_version(path) is None:
        return f"{path / VERSION_FILE} is missing or unreadable (an incomplete snapshot)"
    try:
        manifest = json.loads((path / CHECKSUMS_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path / CHECKSUMS_FILE} is unreadable ({exc})"
    return check_tree(path, manifest)


def latest_snapshot(root: str | Path) -> tuple[int, Path] | None:
    """``(version, path)`` that ``root/latest`` names, else the newest complete one."""
    root = Path(root)
    link = root / LATEST_NAME
    if link.is_symlink():
        target = root / os.readlink(link)
        version = read_version(target)
        if version is not None:
            return version, target
    snaps = list_snapshots(root)
    return snaps[-1] if snaps else None


def wait_for_snapshot(
    path: str | Path, version: int, timeout_s: float, root: str | Path | None = None
) -> tuple[int, Path] | None:
    """``(version, path)`` once snapshot ``path`` is complete as ``version`` (one written
    in the background: ``nexrl.trainer.handoff``); after ``timeout_s`` without it, the
    newest complete snapshot under ``root`` (None when there is none)."""
    deadline = time.monotonic() + timeout_s
    while read_version(path) != version:
        if time.monotonic() > deadline:
            return latest_snapshot(root) if root is not None else None
        time.sleep(0.05)
    return version, Path(path)
