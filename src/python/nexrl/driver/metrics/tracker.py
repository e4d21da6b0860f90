"""``MetricsTracker``: fans each step's metrics out to the configured sinks.

The jsonl sink is always built (``metrics.jsonl`` is the run's record, read
back for plots and the summary) and its errors propagate. Any other sink that
raises while logging is reported once as a warning and disabled: a dashboard
going away never stops training (a sink talking to a server retries a bounded
number of times, with a timeout, before it raises: the mlflow sink's requests).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nexrl.core.plugins.registry import is_spec
from nexrl.driver.metrics.sinks import (
    METRIC_SINKS,
    JsonlSink,
    MetricSink,
    MetricSinkError,
    parse_metric_lines,
)

__all__ = ["MetricsTracker", "read_metrics"]

log = logging.getLogger("nexrl.driver.metrics")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file, in file order; a torn last line (a write cut
    short by a killed process) is skipped. ``FileNotFoundError`` if there is no file."""
    path = Path(path)
    rows, _torn = parse_metric_lines(path.read_text(encoding="utf-8"), str(path))
    return rows


class MetricsTracker:
    """Builds the sinks named in ``backends`` (plus ``jsonl``) under ``output_dir``.

    ``resume_step`` is the step of the checkpoint a resumed run continues from:
    rows logged after it are dropped from metrics.jsonl (they will be redone).
    ``config`` (a plain dict of the recipe) is passed to sinks that store it.
    Unknown names and missing optional packages raise ``MetricSinkError`` here,
    before training starts.
    """

    def __init__(
        self,
        backends: Iterable[str],
        output_dir: Path,
        *,
        run_name: str,
        config: dict[str, Any] | None = None,
        resume_step: int | None = None,
        roots: Sequence[Path] = (),
    ) -> None:
        """``backends``: sink names or classes ('path/to/file.py:Sink', files looked up
        under ``roots``, the recipe's folders; else the working directory)."""
        names = list(dict.fromkeys([JsonlSink.name, *backends]))
        unknown = [n for n in names if n not in METRIC_SINKS and not is_spec(n)]
        if unknown:
            raise MetricSinkError(
                f"logger.backends: unknown metric sink(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(METRIC_SINKS)}"
            )
        self.output_dir = Path(output_dir)
        self.sinks: list[MetricSink] = []
        self.disabled: dict[str, str] = {}  # name -> why it was disabled
        try:
            for name in names:
                self.sinks.append(
                    METRIC_SINKS.get(name, roots=roots)(
                        self.output_dir, run_name=run_name, config=config, resume_step=resume_step
                    )
                )
        except BaseException:
            self.close()
            raise

    @property
    def active(self) -> list[str]:
        """Names of the sinks still receiving metrics."""
        return [s.name for s in self.sinks]

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Send ``metrics`` (values converted to float) for ``step`` to every active sink."""
        values = {str(k): float(v) for k, v in metrics.items()}
        for sink in list(self.sinks):
            try:
                sink.log(step, values)
            except Exception as exc:
                if isinstance(sink, JsonlSink):
                    raise
                self._disable(sink, exc)

    def log_artifacts(self, paths: Sequence[Path]) -> None:
        """Give the run's end files (the reward curve, config.yaml, summary.json) to the
        sinks that store them with their run (mlflow); a sink that fails is disabled with
        one warning, as in ``log``."""
        for sink in list(self.sinks):
            try:
                sink.log_artifacts([Path(p) for p in paths])
            except Exception as exc:
                self._disable(sink, exc)

    def restore(self, step: int, metrics: Mapping[str, Any]) -> bool:
        """Log ``metrics`` for ``step`` unless metrics.jsonl already has a row for it: a
        resumed run gives back the row of the checkpoint it resumes from when the killed
        run was stopped after that checkpoint but before its row was logged. True if
        logged."""
        jsonl = next(s for s in self.sinks if isinstance(s, JsonlSink))
        if any(row.get("step") == step for row in read_metrics(jsonl.path)):
            return False  # (read once, at the resume: every row is flushed as it is logged)
        log.info("metrics.jsonl has no row for step %d: logged from its checkpoint", step)
        self.log(step, metrics)
        return True

    def _disable(self, sink: MetricSink, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("metric sink '%s' failed (%s); it is disabled for this run", sink.name, reason)
        self.sinks.remove(sink)
        self.disabled[sink.name] = reason
        try:
            sink.close()
        except Exception:
            log.debug("closing the failed metric sink '%s' failed too", sink.name, exc_info=True)

    def close(self) -> None:
        """Close every sink (idempotent). A jsonl close error propagates after the rest close."""
        error: BaseException | None = None
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:
                if isinstance(sink, JsonlSink):
                    error = exc
                else:
                    log.warning("closing metric sink '%s' failed: %s", sink.name, exc)
        if error is not None:
            raise error

    def __enter__(self) -> MetricsTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
