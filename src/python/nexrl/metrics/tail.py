"""``PlotRows``: the reward curve's rows of a growing metrics.jsonl, read incrementally.

A redraw during training (every ``logger.plot_min_interval_s``) used to read and parse
the whole file: a cost that grows with the run (a week-long run's file is hundreds of
MB). This reader keeps the byte offset of the last complete line it parsed and, of
each row, only ``step`` and the keys the reward figure draws
(``nexrl.metrics.plots.plotted``), so a redraw reads the new lines only and the rows it
keeps are a few numbers each. A file that became shorter than the offset (a resumed
run rewrote it) is read again from the start; a torn last line is left for the next
read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexrl.metrics.plots import plotted
from nexrl.metrics.sinks import parse_metric_lines

__all__ = ["PlotRows"]


class PlotRows:
    """Incremental reader of ``path`` (module doc); ``rows()`` returns every row so far."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self._rows: list[dict[str, Any]] = []

    def rows(self) -> list[dict[str, Any]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self._rows
        if size < self.offset:  # rewritten (a resume drops the rows past its checkpoint)
            self.offset, self._rows = 0, []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # complete lines only
        if end == 0:
            return self._rows
        rows, _ = parse_metric_lines(chunk[:end].decode("utf-8"), str(self.path))
        self.offset += end
        self._rows.extend(
            {k: v for k, v in row.items() if k == "step" or plotted(k)} for row in rows
        )
        return self._rows
