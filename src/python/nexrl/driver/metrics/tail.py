"""``PlotRows``: the reward curve's rows of a growing metrics.jsonl, read incrementally.

A redraw during training (every ``logger.plot_min_interval_s``) used to read and parse
the whole file: a cost that grows with the run (a week-long run's file is hundreds of
MB). This reader keeps the byte offset of the last complete line it parsed and, of
each row, only ``step`` and the keys the reward figure draws
(``nexrl.driver.metrics.plots.plotted``), so a redraw reads the new lines only and the rows it
keeps are a few numbers each. A file that became shorter than the offset (a resumed
run rewrote it) is read again from the start; a torn last line is left for the next
read.

Bounded: a week-long run logs ~60,000 steps, and the kept rows grew with them (~0.8
MB per 1,000 steps in the driver, docs/benchmarks.md "Long haul"), as did the time of
each redraw. The per-step series (training reward, evaluator metrics, learning
signal) keep at most ``MAX_POINTS`` rows: when full, each two neighbouring rows become
one (each value the mean of the two, at the later step) and the rows that follow are
averaged over as many steps, so every point stands for the same number of steps
(the last one for those seen so far). Validation rows (``val/...``, a few per run)
are kept as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexrl.driver.metrics.plots import VAL_PREFIX, finite_number, plotted
from nexrl.driver.metrics.sinks import parse_metric_lines

__all__ = ["MAX_POINTS", "PlotRows"]

MAX_POINTS = 2048  # per-step rows kept for the figure (even: halved when full)


class _Averaged:
    """Per-step rows, at most ``max_points``, each the mean of ``stride`` steps (module
    doc)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(2, max_points - max_points % 2)
        self.stride = 1
        self.rows: list[dict[str, Any]] = []
        self._sum: dict[str, float] = {}
        self._n: dict[str, int] = {}
        self._steps, self._last = 0, 0

    def add(self, step: int, values: dict[str, float]) -> None:
        for k, v in values.items():
            self._sum[k] = self._sum.get(k, 0.0) + v
            self._n[k] = self._n.get(k, 0) + 1
        self._steps, self._last = self._steps + 1, step
        if self._steps < self.stride:
            return
        self.rows.append(self._pending())
        self._sum, self._n, self._steps = {}, {}, 0
        if len(self.rows) >= self.max_points:
            self.rows = [_mean(a, b) for a, b in zip(self.rows[::2], self.rows[1::2], strict=True)]
            self.stride *= 2

    def _pending(self) -> dict[str, Any]:
        return {"step": self._last, **{k: self._sum[k] / self._n[k] for k in self._sum}}

    def view(self) -> list[dict[str, Any]]:
        return self.rows + ([self._pending()] if self._steps else [])


def _mean(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One row of two neighbours: each value the mean of those present, ``b``'s step."""
    out: dict[str, Any] = {"step": b["step"]}
    for k in {**a, **b}:
        if k != "step":
            got = [r[k] for r in (a, b) if k in r]
            out[k] = sum(got) / len(got)
    return out


class PlotRows:
    """Incremental reader of ``path`` (module doc); ``rows()`` returns every row so far."""

    def __init__(self, path: str | Path, max_points: int = MAX_POINTS) -> None:
        self.path = Path(path)
        self.offset = 0
        self.max_points = max_points
        self._per_step = _Averaged(max_points)
        self._val: list[dict[str, Any]] = []  # validation rows, as logged

    def rows(self) -> list[dict[str, Any]]:
        """The validation rows, then the per-step rows (averaged once past
        ``max_points``: module doc); of each, ``step`` and the plotted numbers."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self._view()
        if size < self.offset:  # rewritten (a resume drops the rows past its checkpoint)
            self.offset, self._per_step, self._val = 0, _Averaged(self.max_points), []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # complete lines only
        if end == 0:
            return self._view()
        rows, _ = parse_metric_lines(chunk[:end].decode("utf-8"), str(self.path))
        self.offset += end
        for row in rows:
            step = row.get("step")
            if not isinstance(step, int):
                continue
            keys = [k for k in row if plotted(k)]
            val = {k: row[k] for k in keys if k.startswith(VAL_PREFIX) and finite_number(row[k])}
            if val:
                self._val.append({"step": step, **val})
            per_step = [k for k in keys if not k.startswith(VAL_PREFIX)]
            if per_step:  # a training step's row (a NaN value, logged null, is left out)
                self._per_step.add(
                    step, {k: float(row[k]) for k in per_step if finite_number(row[k])}
                )
        return self._view()

    def _view(self) -> list[dict[str, Any]]:
        return self._val + self._per_step.view()
