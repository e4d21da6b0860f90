"""``trim_heap``: hand the C heap's free memory back to the operating system.

A long run's driver allocates and frees many small objects per step in several
threads (the Dask scheduler and client, the metrics and plot threads). glibc keeps
freed memory in per-thread arenas instead of returning it, so the driver's RSS crept
up step after step although what Python holds did not (docs/benchmarks.md, "Long
haul"). ``malloc_trim(0)`` returns the free pages at the top of every arena and the
free whole pages inside them; Dask's nanny does the same for its workers through
``MALLOC_TRIM_THRESHOLD_``, which the driver, started by the user, does not get.
A no-op where libc has no ``malloc_trim`` (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

__all__ = ["trim_heap"]


@functools.cache
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def trim_heap() -> bool:
    """``malloc_trim(0)``; True when memory was handed back, False when none was (or
    this libc cannot)."""
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False
