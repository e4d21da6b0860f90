"""Write real parquet and JSON-lines prompt files for the data tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_jsonl(path: Path, rows: Sequence[dict[str, Any] | str]) -> str:
    """``rows`` items are JSON-encoded; a ``str`` item is written verbatim (bad lines)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def numbered_prompts(start: int, n: int) -> list[dict[str, Any]]:
    return [{"prompt": f"question {i}", "answer": str(i)} for i in range(start, start + n)]
