"""Metric sinks: where each step's metrics go, chosen by name in ``logger.backends``.

``METRIC_SINKS`` maps a name to its class. Every sink is built the same way,
``cls(output_dir, run_name=..., config=..., resume_step=...)``, and has
``log(step, metrics)`` and ``close()``. Optional packages (tensorboard, mlflow,
wandb) are imported only when their sink is built; a missing one is a
``MetricSinkError`` at construction that says what to install.

* ``jsonl``       — ``<output_dir>/metrics.jsonl``, one JSON object per step (always on);
* ``console``     — one compact log line per step on the ``nexrl.metrics`` logger;
* ``tensorboard`` — event files under ``<output_dir>/tensorboard``;
* ``mlflow``      — an MLflow run: a sqlite database in the run folder, or a server;
* ``wandb``       — a W&B run under ``<output_dir>/wandb`` (offline unless set online).

Sinks that keep a remote run (mlflow, wandb) also get ``log_artifacts(paths)`` at the
end of a run (the reward curve, config.yaml, summary.json).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import secrets
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO, Any, ClassVar

from nexrl.errors import NexrlError
from nexrl.plugins.registry import Registry
from nexrl.util.files import atomic_write_text

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

log = logging.getLogger("nexrl.metrics")


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
    """One compact log line per step: the key metrics present, on ``nexrl.metrics``."""

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


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``{"a.b": "1", "c": "[1, 2]"}``."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = str(value)
    return flat


def _run_record(path: Path) -> dict[str, Any] | None:
    """The JSON object a sink kept in the run folder (its tracker's run id), if any."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


class MlflowSink(MetricSink):
    """One MLflow run per run folder: the recipe's values (flattened, ``trainer.lr``) as
    params, every metric at every step, and at the end the reward curve, config.yaml and
    summary.json as artifacts.

    Where (``logger.mlflow_tracking_uri``): a set value (``http://host:5000``, a
    ``sqlite:///`` path, ...), else ``MLFLOW_TRACKING_URI``, else the sqlite database
    ``<output_dir>/mlflow.db`` with artifacts in ``<output_dir>/mlartifacts`` (look at it
    with ``mlflow ui --backend-store-uri sqlite:///<output_dir>/mlflow.db``).

    The experiment is ``config["project_name"]`` (default ``nexrl``), the run is named
    ``run_name``. Its id is kept in ``<output_dir>/mlflow_run.json``: a resumed run
    continues the same MLflow run (same tracking URI); steps redone after the checkpoint
    are logged again (MLflow keeps both values; metrics.jsonl keeps the redone one).
    Non-finite values are skipped. Every request to a server has a timeout and a
    bounded retry (``MLFLOW_HTTP_REQUEST_TIMEOUT`` 10 s, ``..._MAX_RETRIES`` 2,
    ``..._BACKOFF_FACTOR`` 1 unless set): a server that goes away costs the tracker one
    warning, and this sink is disabled for the rest of the run (``MetricsTracker``).
    """

    name = "mlflow"
    requires = ("mlflow",)
    RUN_FILE = "mlflow_run.json"
    HTTP_DEFAULTS: ClassVar[dict[str, str]] = {
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    }
    MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param's value
    BATCH = 100  # params per log_batch (MLflow's limit); metrics: 1000

    def _open(self) -> None:
        for key, value in self.HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        tracking = self._import("mlflow.tracking")
        entities = self._import("mlflow.entities")
        self._metric_cls = entities.Metric
        self._param_cls = entities.Param
        self._failed = False
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = self._tracking_uri()
        try:
            self._client = tracking.MlflowClient(tracking_uri=self.tracking_uri)
            self.run_id = self._continued() or self._new_run()
            self._log_params()
        except Exception as exc:
            raise MetricSinkError(
                f"logger.backends: the 'mlflow' sink cannot use the tracking URI "
                f"{self.tracking_uri} ({type(exc).__name__}: {exc})"
            ) from exc

    def _tracking_uri(self) -> str:
        logger_cfg = (self.config or {}).get("logger") or {}
        uri = logger_cfg.get("mlflow_tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            return str(uri)
        return f"sqlite:///{(self.output_dir / 'mlflow.db').resolve()}"

    @property
    def _default_store(self) -> bool:
        return self.tracking_uri == f"sqlite:///{(self.output_dir / 'mlflow.db').resolve()}"

    def _continued(self) -> str | None:
        """The run id kept in the run folder when this is a resume to the same store."""
        if self.resume_step is None:
            return None
        kept = _run_record(self.output_dir / self.RUN_FILE)
        if kept is None:
            return None
        if kept.get("tracking_uri") != self.tracking_uri:
            log.warning(
                "mlflow: the run was tracked at %s, now %s: a new MLflow run is started",
                kept.get("tracking_uri"),
                self.tracking_uri,
            )
            return None
        run_id = str(kept["run_id"])
        self._client.update_run(run_id, status="RUNNING")
        log.info("mlflow: continuing run %s at %s", run_id, self.tracking_uri)
        return run_id

    def _new_run(self) -> str:
        found = self._client.get_experiment_by_name(self.project)
        if found is not None:
            exp_id = found.experiment_id
        else:
            location = (
                (self.output_dir / "mlartifacts").resolve().as_uri()
                if self._default_store
                else None
            )
            exp_id = self._client.create_experiment(self.project, artifact_location=location)
        run = self._client.create_run(
            exp_id,
            run_name=self.run_name,
            tags={"nexrl.output_dir": str(self.output_dir.resolve())},
        )
        record = {
            "tracking_uri": self.tracking_uri,
            "experiment_id": exp_id,
            "run_id": run.info.run_id,
        }
        atomic_write_text(self.output_dir / self.RUN_FILE, json.dumps(record, indent=1) + "\n")
        log.info("mlflow: run %s at %s", run.info.run_id, self.tracking_uri)
        return str(run.info.run_id)

    def _log_params(self) -> None:
        flat = {
            key: value[: self.MAX_PARAM_LENGTH]
            for key, value in _flatten(self.config or {}).items()
        }
        existing: dict[str, str] = dict(self._client.get_run(self.run_id).data.params)
        changed = sorted(k for k, v in flat.items() if k in existing and existing[k] != v)
        if changed:  # MLflow params cannot change; config.yaml (an artifact) has the new ones
            log.info("mlflow: recipe values changed since the run started: %s", ", ".join(changed))
        params = [self._param_cls(k, v) for k, v in flat.items() if k not in existing]
        for i in range(0, len(params), self.BATCH):
            self._client.log_batch(self.run_id, params=params[i : i + self.BATCH])

    def log(self, step: int, metrics: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        batch = [
            self._metric_cls(key, value, now, step)
            for key, value in metrics.items()
            if math.isfinite(value)
        ]
        try:
            for i in range(0, len(batch), 1000):
                self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])
        except Exception:
            self._failed = True
            raise

    def log_artifacts(self, paths: list[Path]) -> None:
        try:
            for path in paths:
                if path.is_file():
                    self._client.log_artifact(self.run_id, str(path))
        except Exception:
            self._failed = True
            raise

    def close(self) -> None:
        if not self._failed:  # a server that failed is not asked again (another timeout)
            self._failed = True
            self._client.set_terminated(self.run_id)


class WandbSink(MetricSink):
    """A Weights & Biases run under ``<output_dir>/wandb``, online or offline as the user
    sets it: ``WANDB_MODE`` (``online``, ``offline``, ``disabled``) when set; else online
    when ``WANDB_API_KEY`` is set, offline otherwise (sync an offline run later with
    ``wandb sync <output_dir>/wandb/offline-run-*``). The API key is read by wandb from
    the environment (or its own login) and never written to the run folder. The project
    is ``config["project_name"]`` (default ``nexrl``), the config the recipe. The run id
    is kept in ``<output_dir>/wandb_run.json``: a resumed run continues the same run
    (steps redone after the checkpoint are dropped by W&B, whose steps only go up)."""

    name = "wandb"
    requires = ("wandb",)
    RUN_FILE = "wandb_run.json"

    def _open(self) -> None:
        wandb = self._wandb = self._import("wandb")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        kept = None
        if self.resume_step is not None:
            kept = _run_record(self.output_dir / self.RUN_FILE)
        self.run_id = str(kept["run_id"]) if kept and kept.get("run_id") else secrets.token_hex(4)
        mode = None
        if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
            mode = "offline"
        # silent: W&B's own lines (an ad for its tracing library, the run's history and
        # summary tables: some 35 lines) stay off the terminal (a failure still raises,
        # and the run says it); the line below says where the run is
        settings = wandb.Settings(console="off", init_timeout=90, x_disable_stats=True, silent=True)
        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")  # (its ad ignores silent)
        self._run = wandb.init(
            project=self.project,
            name=self.run_name,
            id=self.run_id,
            resume="allow",
            dir=str(self.output_dir),
            mode=mode,
            config=self.config or {},
            settings=settings,
        )
        record = {"run_id": self.run_id, "project": self.project}
        atomic_write_text(self.output_dir / self.RUN_FILE, json.dumps(record, indent=1) + "\n")
        if self._run.settings.mode == "offline":
            folder = Path(self._run.dir).parent  # (dir: its files/ folder)
            log.info(
                "W&B: offline run %s (project %s) in %s; upload it with: wandb sync %s",
                self.run_id,
                self.project,
                folder,
                folder,
            )
        elif getattr(self._run, "url", None):
            log.info("W&B: run %s at %s", self.run_id, self._run.url)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()
        # finish() returns before wandb's service has written the run file out (seen with
        # wandb 0.31 offline: a header only); tearing the service down flushes it.
        self._wandb.teardown()


# logger.backends names; a plugin adds its own sink with METRIC_SINKS.register("name"),
# or a recipe names a class, 'path/to/file.py:MySink' (a MetricSink).
METRIC_SINKS: Registry[type[MetricSink]] = Registry(
    "metric sink", base=MetricSink, field="logger.backends"
)
for _cls in (ConsoleSink, JsonlSink, TensorBoardSink, MlflowSink, WandbSink):
    METRIC_SINKS.register(_cls.name)(_cls)
