"""A run folder's ``parent.json``: the run whose snapshot it started from (staged
training; written by ``nexrl.driver.modeling.parent``), read back and said in one line, for
the driver's log, the summary and the next stage's own record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["PARENT_FILE", "describe_parent", "read_parent"]

PARENT_FILE = "parent.json"


def read_parent(output_dir: str | Path) -> dict[str, Any] | None:
    """A run folder's ``parent.json`` (None when it has none or it is unreadable)."""
    try:
        data = json.loads((Path(output_dir) / PARENT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe_parent(parent: dict[str, Any]) -> str:
    """One line: ``runs/stage1 (experiment stage1) snapshot v40, sha256:1a2b3c4d``."""
    where = parent.get("run") or str(Path(str(parent.get("snapshot"))).parent)
    name = parent.get("experiment_name")
    fp = parent.get("fingerprint")
    return (
        f"{where}"
        + (f" (experiment {name})" if name else "")
        + f" snapshot v{parent['version']}"
        + (f", {str(fp)[:15]}" if fp else "")
    )
