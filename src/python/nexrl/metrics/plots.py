"""Reward curve PNG from metrics.jsonl rows (matplotlib, Agg, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from nexrl.util.files import atomic_path

__all__ = ["plot_reward_curve"]

TRAIN_KEY = "reward/mean"
VAL_KEY = "val/reward/mean"


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = {}
    for row in rows:
        value, step = row.get(key), row.get("step")
        if isinstance(step, int) and isinstance(value, int | float) and math.isfinite(value):
            points[step] = float(value)  # a step logged twice (resume): the later row wins
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def plot_reward_curve(
    rows: list[dict[str, Any]], out_png: Path, *, title: str | None = None
) -> Path | None:
    """Draw training ``reward/mean`` (line) and ``val/reward/mean`` (markers) against
    ``step`` into ``out_png``, replacing it atomically. Returns the path, or ``None``
    (and writes nothing) when no row has a reward."""
    train_steps, train = _series(rows, TRAIN_KEY)
    val_steps, val = _series(rows, VAL_KEY)
    if not train and not val:
        return None

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)  # explicit Agg canvas: no pyplot, no global backend switch
    ax = fig.add_subplot()
    if train:
        ax.plot(train_steps, train, color="tab:blue", linewidth=1.5, label="train reward/mean")
    if val:
        ax.plot(
            val_steps,
            val,
            linestyle="none",
            marker="o",
            color="tab:orange",
            label="validation reward/mean",
        )
    ax.set_title(title or "Reward")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()

    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_png, fsync=False, fsync_parent=False) as tmp:
        fig.savefig(tmp, format="png")
    return out_png
