"""A data row as one short line, for messages that name the row a problem came from."""

from __future__ import annotations

import json
from typing import Any

#: Characters of a row shown in a message (the rest is cut, "..." says so).
ROW_CHARS = 300


def row_text(row: Any, limit: int = ROW_CHARS) -> str:
    """``row`` as JSON on one line (non-JSON values as their ``str``), cut at ``limit``."""
    text = json.dumps(row, default=str)
    return text if len(text) <= limit else f"{text[:limit]}..."
