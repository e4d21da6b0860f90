"""``trim_heap`` hands freed C-heap memory back: a process that allocated ~200 MB of
small objects in a thread and freed them keeps most of it as RSS until
``malloc_trim`` (glibc), and loses it after (what the driver does every 100 steps)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import threading, psutil
from nexrl.core.util.heap import trim_heap, _malloc_trim
if _malloc_trim() is None:
    print("NO_MALLOC_TRIM"); raise SystemExit
def churn():
    keep = [bytearray(1000) for _ in range(200_000)]  # ~200 MB in a thread's arena
    tail = [bytearray(100) for _ in range(1000)]  # allocated last: pins the arena's top
    del keep
    churn.tail = tail
t = threading.Thread(target=churn); t.start(); t.join()
me = psutil.Process()
before = me.memory_info().rss
trimmed = trim_heap()
after = me.memory_info().rss
print(trimmed, before >> 20, after >> 20)
"""


def test_freed_memory_goes_back_to_the_os() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    if out == ["NO_MALLOC_TRIM"]:
        pytest.skip("this libc has no malloc_trim (not glibc): trim_heap is a no-op here")
    trimmed, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert trimmed and before - after >= 100, (before, after)  # MiB
