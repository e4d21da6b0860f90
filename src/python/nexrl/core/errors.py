"""The common base of nexrl's exceptions (imports nothing else from nexrl)."""

from __future__ import annotations

__all__ = ["NexrlError"]


class NexrlError(Exception):
    """A mistake or failure a user can act on.

    Its ``str()`` is one line that names the field, file or component and the fix,
    so ``nexrl train`` can print it as ``error: ...`` instead of a traceback.
    Subclasses keep their other bases (``ValueError``, ``RuntimeError``, ...)
    so existing ``except`` clauses still catch them.
    """
