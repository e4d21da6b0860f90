"""The exception for problems with the prompt data."""

from __future__ import annotations

from nexrl.core.errors import NexrlError


class DataError(NexrlError):
    """A data file or row is unusable; the message names the file (and row) and the fix."""
