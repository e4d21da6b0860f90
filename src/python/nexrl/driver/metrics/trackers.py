"""The metric sinks that keep a run on a tracker of its own: ``mlflow`` (an MLflow run:
a sqlite database in the run folder, or a server) and ``wandb`` (a W&B run under
``<output_dir>/wandb``, offline unless set online). Both also get
``log_artifacts(paths)`` at the end of a run; ``nexrl.driver.metrics.sinks`` registers them
in ``METRIC_SINKS``."""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import time
from pathlib import Path
from typing import Any, ClassVar

from nexrl.core.util.files import atomic_write_text
from nexrl.driver.metrics.sinks import MetricSink, MetricSinkError

__all__ = ["MlflowSink", "WandbSink"]

log = logging.getLogger("nexrl.driver.metrics")


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
