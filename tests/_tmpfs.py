"""``mounted_tmpfs``: a small file system of its own for a test that fills a disk (a
real tmpfs; needs root or CAP_SYS_ADMIN, else the test is skipped saying so)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["mounted_tmpfs"]


@contextlib.contextmanager
def mounted_tmpfs(size: str, prefix: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"48M"``) mounted on a fresh folder (not under pytest's
    shared temp root, which other pytest processes of a parallel run prune); unmounted
    and removed after."""
    mnt = Path(tempfile.mkdtemp(prefix=prefix))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here (mount: {done.stderr.strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(mnt, ignore_errors=True)
