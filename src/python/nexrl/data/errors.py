"""The exception for problems with the prompt data."""

from __future__ import annotations


class DataError(Exception):
    """A data file or row is unusable; the message names the file (and row) and the fix."""
