"""The run folder as the dashboard's columns, read incrementally.

Everything the page shows is on disk in the run folder, so a page opened after a
driver restart (resume) or on a finished run shows the whole history:

* ``metrics.jsonl``: one row per step (and validation rows), written by the driver;
* ``samples.jsonl``: a few decoded trajectories per step (``nexrl.driver.dashboard.samples``);
* ``config.yaml``: the experiment name and the total number of steps.

``RunHistory.poll()`` reads only the bytes appended since the previous call (a
torn last line is left for the next call), so a page that polls every second
costs a ``stat`` while nothing changes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["METRIC_COLUMNS", "TIME_PARTS", "RunHistory", "Tail"]

# page column -> metrics.jsonl key
METRIC_COLUMNS: dict[str, str] = {
    "reward_mean": "reward/mean",
    "reward_std": "reward/std",
    "val_reward": "val/reward/mean",
    "t_wait": "timing/wait_batch",
    "t_train": "timing/train",
    "t_sync": "timing/weight_sync",
    "t_val": "val/time_s",
    "t_ckpt": "timing/checkpoint",
    "t_step": "timing/step",
    "v_trainer": "version/trainer",
    "v_inference": "version/inference",
    "v_rollout_min": "version/rollout_min",
    "v_rollout_max": "version/rollout_max",
    "lag_max": "version/lag_max",
    "in_flight_at_reload": "weight/in_flight_at_reload",
    "groups_done": "rollout/groups_done",
    "delivered": "pool/delivered_total",
    "in_flight": "rollout/in_flight",
    "traj_per_s": "perf/trajectories_per_s",
    "failed_groups": "rollout/failed_groups",
    "evaluator_errors": "rollout/evaluator_errors",
    "restarts": "inference/restarts",
}
# the stacked step-time bars: (column, label); a missing part is 0 for that step
TIME_PARTS: list[tuple[str, str]] = [
    ("t_wait", "waiting for rollouts"),
    ("t_train", "train"),
    ("t_sync", "weight sync"),
    ("t_val", "validation"),
    ("t_ckpt", "checkpoint"),
]
SAMPLE_COLUMNS = [
    "step",
    "version",
    "reward",
    "advantage",
    "prompt",
    "response_html",
    "color",
    "trace_html",
]


@dataclass
class Tail:
    """The complete lines appended to a file since the last ``read`` (JSON-decoded)."""

    path: Path
    offset: int = 0
    _size: int = field(default=-1, repr=False)

    def read(self) -> list[dict[str, Any]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # rewritten (the jsonl sink repairs it on resume): start over
            self.offset = 0
            raise Rewritten(str(self.path))
        if size == self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1  # a torn last line waits for the next read
        self.offset += end
        rows = []
        for line in chunk[:end].splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line that is not JSON is not the page's to repair
        return rows


class Rewritten(Exception):
    """The file shrank: it was rewritten, the page reloads it whole."""


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def metric_columns(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Training rows (those with ``reward/mean``) as the page's columns; a metric a
    row lacks is NaN (the step-time parts: 0, they are stacked)."""
    rows = [r for r in rows if "reward/mean" in r]
    out: dict[str, list[float]] = {"step": [float(r["step"]) for r in rows]}
    for col, key in METRIC_COLUMNS.items():
        out[col] = [_num(r.get(key)) for r in rows]
    for col, _ in TIME_PARTS:
        out[col] = [0.0 if math.isnan(v) else v for v in out[col]]
    mean, std = out["reward_mean"], out["reward_std"]
    out["reward_lo"] = [m - (0.0 if math.isnan(s) else s) for m, s in zip(mean, std, strict=True)]
    out["reward_hi"] = [m + (0.0 if math.isnan(s) else s) for m, s in zip(mean, std, strict=True)]
    return out


def validation_columns(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Validation points (every row with ``val/reward/mean``, step 0 included)."""
    rows = [r for r in rows if isinstance(r.get("val/reward/mean"), (int, float))]
    return {
        "step": [float(r["step"]) for r in rows],
        "val_reward": [float(r["val/reward/mean"]) for r in rows],
    }


class RunHistory:
    """A run folder, read as the page needs it (see the module doc)."""

    def __init__(self, root: str | Path, *, identity: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.metrics = Tail(self.root / "metrics.jsonl")
        self.samples = Tail(self.root / "samples.jsonl")
        self.rows: list[dict[str, Any]] = []
        self.identity = dict(identity or {})
        self._config: dict[str, Any] | None = None  # config.yaml, read once

    def poll(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        """(new metric rows, new sample rows, whether the metrics were rewritten and
        ``self.rows`` now holds the whole file again)."""
        reset = False
        try:
            new = self.metrics.read()
        except Rewritten:
            self.rows, reset = [], True
            new = self.metrics.read()
        self.rows.extend(new)
        try:
            samples = self.samples.read()
        except Rewritten:
            samples = self.samples.read()
        return new, samples, reset

    def config(self) -> dict[str, Any]:
        """``experiment_name`` and ``trainer.total_train_steps`` from config.yaml
        (read once it exists: the run writes it before its cluster starts)."""
        if self._config is not None:
            return self._config
        path = self.root / "config.yaml"
        out: dict[str, Any] = {}
        if not path.exists():
            return out
        import yaml

        try:
            cfg = yaml.safe_load(path.read_text())
            out["experiment"] = str(cfg.get("experiment_name") or "")
            out["total_steps"] = int(cfg["trainer"]["total_train_steps"])
        except Exception:  # a config the page cannot read: the page shows less
            pass
        self._config = out
        return out

    def status(self, now: float) -> dict[str, Any]:
        """Recipe, experiment, step / total and the ETA (mean step time so far)."""
        info = {**self.config(), **self.identity}
        train = [r for r in self.rows if "reward/mean" in r]
        step = int(train[-1]["step"]) if train else 0
        total = int(info.get("total_steps") or 0)
        times = [float(r["timing/step"]) for r in train[-20:] if "timing/step" in r]
        eta = (total - step) * sum(times) / len(times) if times and total > step else 0.0
        last = float(train[-1].get("time", now)) if train else now
        return {
            "recipe": str(info.get("recipe", "")),
            "experiment": str(info.get("experiment", "")),
            "step": step,
            "total": total,
            "eta_s": eta,
            "seconds_since_last_step": max(0.0, now - last),
        }
