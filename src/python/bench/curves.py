"""Validation curves of several runs in one figure: the before/after picture of
docs/user-guide.md, "When it does not learn".

    PYTHONPATH=src/python python -m bench.curves docs/img/top_two_remedies.png \\
        "from scratch=runs/top_two_tiny" "SFT, then RL=runs/top_two_from_sft" ...

Each ``label=run folder`` is drawn as its ``val/reward/mean`` per step (step 0:
the weights the run started from), from its ``metrics.jsonl``;
``label=run folder@key`` draws another key (``val/eval/exact``), and a ``+N``
at the end shifts the run's steps by N (a second stage drawn after the first).
"""

from __future__ import annotations

import sys
from pathlib import Path

from nexrl.core.util.files import atomic_path
from nexrl.driver.metrics import read_metrics
from nexrl.driver.metrics.plots import _series

__all__ = ["plot_curves", "val_curve"]


def val_curve(run: Path, key: str = "val/reward/mean") -> list[tuple[int, float]]:
    """``(step, value)`` of ``key`` in ``run``'s metrics.jsonl (a later row wins, as in
    the run's own plot)."""
    steps, values = _series(read_metrics(Path(run) / "metrics.jsonl"), key)
    return list(zip(steps, values, strict=True))


def plot_curves(curves: dict[str, list[tuple[int, float]]], out: Path, title: str) -> Path:
    """One line with markers per label, saved as a PNG at ``out`` (atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, points in curves.items():
        ax.plot([s for s, _ in points], [v for _, v in points], marker="o", label=label)
    ax.set_title(title)
    ax.set_xlabel("RL step (0: the weights the first run started from)")
    ax.set_ylabel("greedy validation reward")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, fsync=False, fsync_parent=False) as tmp:
        fig.savefig(tmp, format="png")
    return out


def main(argv: list[str]) -> None:
    out, *pairs = argv
    curves = {}
    for pair in pairs:
        label, where = pair.split("=", 1)
        where, _, shift = where.partition("+")
        run, _, key = where.partition("@")
        points = val_curve(Path(run), key or "val/reward/mean")
        curves[label] = [(step + int(shift or 0), value) for step, value in points]
    plot_curves(curves, Path(out), "recipes/top_two: held-out exact answers")


if __name__ == "__main__":
    main(sys.argv[1:])
