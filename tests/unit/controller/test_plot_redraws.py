"""The reward curve redrawn while training: every ``logger.plot_every`` steps, at most
once per ``logger.plot_min_interval_s`` (a redraw is ~0.1 s of the driver's CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexrl.driver.controller.components import Components
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.metrics import MetricsTracker


def _parts(root: Path, interval_s: float) -> Components:
    """Components with only what a redraw reads: the run folder (the other parts are
    never touched by ``plot_in_background``)."""
    unused: Any = None
    return Components(
        run=RunDir(root), sync_policy=unused, cluster=unused, trainer=unused,
        supervisor=unused, pool=unused, loader=unused, dispatcher=unused, tracker=unused,
        progress=unused, val_groups=[], snapshot_dir=root / "snapshots", pad_token_id=0,
        groups_per_batch=1, group_size=1, plot_every=1, plot_min_interval_s=interval_s,
    )  # fmt: skip


def _redraw(parts: Components) -> bool:
    """Ask for a redraw, wait for it; whether the curve was drawn."""
    png = parts.run.plots / "reward_curve.png"
    png.unlink(missing_ok=True)
    parts.plot_in_background()
    if parts._plotting is not None:
        parts._plotting.result(timeout=120)
    return png.is_file()


def test_redraws_are_at_least_the_interval_apart(tmp_path: Path) -> None:
    with MetricsTracker([], tmp_path, run_name="r") as tracker:
        for step in (1, 2, 3):
            tracker.log(step, {"reward/mean": 0.1 * step})
    throttled = _parts(tmp_path, interval_s=3600.0)
    try:
        assert _redraw(throttled)  # the first one is drawn
        assert not _redraw(throttled)  # the next step's, within the hour: skipped
        throttled.plot_min_interval_s = 0.0
        assert _redraw(throttled)  # no interval: every step's
        assert _redraw(throttled)
    finally:
        if throttled._plot_pool is not None:
            throttled._plot_pool.shutdown(wait=True)
