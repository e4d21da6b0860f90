"""Metric sinks: where each step's metrics go, chosen by name in ``logger.backends``.

``METRIC_SINKS`` maps a name to its class. Every sink is built the same way,
``cls(output_dir, run_name=..., config=..., resume_step=...)``, and has
``log(step, metrics)`` and ``close()``. Optional packages (tensorboard, mlflow,
wandb) are imported only when their sink is built; a missing one is a
``MetricSinkError`` at construction that says what to install.

* ``jsonl``       — ``<output_dir>/metrics.jsonl``, one JSON object per step (always on);
* ``console``     — one compact log line per step on the ``nexrl.driver.metrics`` logger;
* ``tensorboard`` — event files under ``<output_dir>/tensorboard``;
* ``mlflow``      — an MLflow run: a sqlite database in the run folder, or a server;
* ``wandb``       — a W&B run under ``<output_dir>/wandb`` (offline unless set online).

Sinks that keep a remote run (mlflow, wandb: ``nexrl.driver.metrics.trackers``) also get
``log_artifacts(paths)`` at the end of a run (the reward curve, config.yaml,
summary.json).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any, ClassVar

from nexrl.core.errors import NexrlError
from nexrl.core.plugins.registry import Registry
from nexrl.core.util.files import atomic_write_text

__all__ = [
    "METRICS_FILE",
    "METRIC_SINKS",
    "ConsoleSink",
    "JsonlSink",
    "MetricSink",
    "MetricSinkError",
    "MlflowSink",
    "TensorBoardSink",
    "WandbSink",
    "missing_packages",
    "parse_metric_lines",
]

METRICS_FILE = "metrics.jsonl"
RUNNING_KEY = "time/running_s"
RESERVED_KEYS = ("step", "time", RUNNING_KEY)

log = logging.getLogger("nexrl.driver.metrics")


class MetricSinkError(RuntimeError, NexrlError):
    """A sink cannot be built (unknown name, missing package)."""


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def parse_metric_lines(text: str, source: str = METRICS_FILE) -> tuple[list[dict[str, Any]], bool]:
    """Parse the text of a metrics.jsonl file into rows.

    Returns ``(rows, torn)``: ``torn`` is true when the last line was a partial
    write (not a complete JSON object followed by a newline) and was dropped.
    A bad line anywhere else is corruption, not a torn write: ``ValueError``.
    """
    lines = text.split("\n")
    # A complete file ends with "\n", so the final split item is "".
    tail = lines.pop()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not tail:
                # last complete line garbled (e.g. a crash mid-append after a torn write)
                return rows, True
            raise ValueError(f"{source}:{number}: not a JSON object ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{source}:{number}: not a JSON object")
        rows.append(row)
    torn = bool(tail.strip())
    return rows, torn


def missing_packages(name: str) -> list[str]:
    """Packages the sink ``name`` needs that are not importable here (``[]`` if none)."""
    if name not in METRIC_SINKS:
        return []
    cls = METRIC_SINKS.get(name)
    return [p for p in cls.requires if importlib.util.find_spec(p) is None]


class MetricSink(ABC):
    """One destination of per-step metrics.

    ``requires`` names the import packages the sink needs (checked by the recipe
    rule for ``logger.backends`` before a run starts, and again at construction).
    """

    name: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        output_dir: Path,
        *,
        run_name: str = "nexrl",
        config: dict[str, Any] | None = None,
        resume_step: int | None = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.run_name = run_name
        self.config = config
        self.resume_step = resume_step
        self._open()

    def _open(self) -> None:  # noqa: B027 (optional hook: the console sink opens nothing)
        """Open what the sink writes to (the end of ``__init__``; the arguments are
        ``self.output_dir``, ``self.run_name``, ``self.config``, ``self.resume_step``)."""

    @property
    def project(self) -> str:
        """``config["project_name"]`` (the recipe's), default ``nexrl``."""
        return str((self.config or {}).get("project_name") or "nexrl")

    @abstractmethod
    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` for ``step``."""

    def log_artifacts(self, paths: list[Path]) -> None:  # noqa: B027 (optional hook)
        """Store the run's end files (those that exist) with the run, where the sink can."""

    def close(self) -> None:  # noqa: B027 (optional hook; most sinks have nothing to release)
        """Flush and release whatever the sink holds."""

    def _missing(self, package: str, exc: ImportError) -> MetricSinkError:
        """The error for a package this sink needs that cannot be imported."""
        return MetricSinkError(
            f"logger.backends: the '{self.name}' metric sink needs the '{package}' package, "
            f"which cannot be imported ({exc}). Install it (pip install {package}) or remove "
            f"'{self.name}' from logger.backends."
        )

    def _import(self, module: str) -> Any:
        """Import ``module`` of an optional package (not a project dependency, so not
        imported by name) or raise a ``MetricSinkError`` that says what to install."""
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            raise self._missing(module.split(".")[0], exc) from exc


class JsonlSink(MetricSink):
    """Appends ``{"step": S, "time": T, "time/running_s": R, "<metric>": value, ...}``
    lines to metrics.jsonl.

    ``time/running_s`` is the seconds the run has been running: counted from this
    sink's construction (just before the training loop) and carried on from the
    rows a resumed run keeps, so the idle gap between a stopped run and its resume
    is not counted (the summary's wall time is its last value).

    NaN and infinities are written as ``null``. Each line is flushed (not
    fsynced) as it is written. On open, a torn last line left by a killed process
    is dropped; with ``resume_step=S`` rows with ``step > S`` are removed too (the
    file is rewritten atomically), since those steps will be run again.
    ``resume_step=0`` therefore starts the file afresh; ``None`` keeps every row.
    The metric keys ``step``, ``time`` and ``time/running_s`` are reserved and
    ignored if passed.
    """

    name = "jsonl"

    def _open(self) -> None:
        self.path = self.output_dir / METRICS_FILE
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._running_before = self._repair(self.resume_step)
        self._started = time.monotonic()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def _repair(self, resume_step: int | None) -> float:
        """Drop the rows a resume redoes (and a torn last line); the running time the
        rows kept reached."""
        if not self.path.exists():
            return 0.0
        text = self.path.read_text(encoding="utf-8")
        rows, torn = parse_metric_lines(text, str(self.path))
        kept = rows
        if resume_step is not None:
            kept = [
                r for r in rows if not (isinstance(r.get("step"), int) and r["step"] > resume_step)
            ]
        if torn or len(kept) != len(rows):
            dropped = len(rows) - len(kept)
            log.info(
                "%s: dropping %d row(s) after step %s%s",
                self.path,
                dropped,
                resume_step,
                " and a torn last line" if torn else "",
            )
            self._rewrite(kept)
        running = [row.get(RUNNING_KEY) for row in kept]
        return max(
            (float(v) for v in running if isinstance(v, int | float) and math.isfinite(v)),
            default=0.0,
        )

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)
        atomic_write_text(self.path, text, fsync=True, fsync_parent=False)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: log() after close()")
        running = self._running_before + time.monotonic() - self._started
        row: dict[str, Any] = {
            "step": int(step),
            "time": round(time.time(), 3),
            RUNNING_KEY: round(running, 3),
        }
        for key, value in metrics.items():
            if key not in RESERVED_KEYS:
                row[key] = _finite_or_none(float(value))
        self._reopen_if_removed(step)
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()

    def _reopen_if_removed(self, step: int) -> None:
        """A metrics.jsonl removed (or moved away) while the run writes it: a new one,
        with a warning. Appending to the open file would have gone on into the removed
        one, every row after it lost, and the run's summary failed on the missing file."""
        assert self._file is not None
        try:
            same = os.path.samestat(os.fstat(self._file.fileno()), os.stat(self.path))
        except OSError:  # not there at all
            same = False
        if same:
            return
        self._file.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        log.warning(
            "%s was removed or replaced during the run: the rows from step %d on are in a "
            "new file; the earlier ones are not (nor in its plots and summary)",
            self.path,
            step,
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ConsoleSink(MetricSink):
    """One compact log line per step: the key metrics present, on ``nexrl.driver.metrics``."""

    name = "console"
    # (metric, label) shown when present, in this order
    KEY_METRICS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("reward/mean", "reward"),
        ("val/reward/mean", "val_reward"),
        ("actor/pg_loss", "loss"),
        ("actor/kl_loss", "kl"),
        ("actor/entropy", "entropy"),
        ("response_length/mean", "resp_len"),
        ("perf/trajectories_per_s", "traj/s"),
        ("version/lag_max", "lag"),
        ("timing/step", "step_s"),
    )
    FALLBACK_COUNT = 4

    def log(self, step: int, metrics: dict[str, float]) -> None:
        log.info("%s", self.format_line(step, metrics))

    def format_line(self, step: int, metrics: dict[str, float]) -> str:
        """``step 3 | reward 0.41 | loss -0.0123 | ...`` (the first few metrics if no key one)."""
        parts = [
            f"{label} {_fmt(metrics[key])}" for key, label in self.KEY_METRICS if key in metrics
        ]
        if not parts:
            parts = [f"{k} {_fmt(metrics[k])}" for k in sorted(metrics)[: self.FALLBACK_COUNT]]
        return " | ".join([f"step {step}", *parts])


class TensorBoardSink(MetricSink):
    """``add_scalar`` per metric into ``<output_dir>/tensorboard``.

    On resume from step S, events after S are purged (``purge_step=S+1``).
    Events are flushed by the writer's own timer and at ``close()``.
    """

    name = "tensorboard"
    requires = ("tensorboard",)

    def _open(self) -> None:
        try:
            import tensorboard  # noqa: F401 (a dependency: imported by name so Pants infers it)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise self._missing("tensorboard", exc) from exc
        self.log_dir = self.output_dir / "tensorboard"
        purge = self.resume_step + 1 if self.resume_step is not None else None
        self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        self._writer.close()


# logger.backends names; a plugin adds its own sink with METRIC_SINKS.register("name"),
# or a recipe names a class, 'path/to/file.py:MySink' (a MetricSink).
METRIC_SINKS: Registry[type[MetricSink]] = Registry(
    "metric sink", base=MetricSink, field="logger.backends"
)
# the sinks that keep a run on a tracker of its own live in nexrl.driver.metrics.trackers
from nexrl.driver.metrics.trackers import MlflowSink, WandbSink  # noqa: E402

_BUILT_IN: tuple[type[MetricSink], ...] = (
    ConsoleSink,
    JsonlSink,
    TensorBoardSink,
    MlflowSink,
    WandbSink,
)
for _cls in _BUILT_IN:
    METRIC_SINKS.register(_cls.name)(_cls)
