"""The ``/nexrl`` Bokeh document: the run's reward, step time, versions, pool and
latest trajectories, refreshed once a second from the run folder (``RunHistory``).

Named models, so a test (or a user's console) reads the page's data with
``Bokeh.documents[0].get_model_by_name(...)``: ``nexrl-metrics`` (one row per
training step, the columns of ``history.METRIC_COLUMNS``), ``nexrl-validation``,
``nexrl-samples``, ``nexrl-status`` (the identity line) and ``nexrl-trace`` (the
selected trajectory's agent trace: its model and tool calls).
"""

from __future__ import annotations

import time
from typing import Any

from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource
from bokeh.models.annotations import Band
from bokeh.models.widgets import (
    DataTable,
    Div,
    HTMLTemplateFormatter,
    NumberFormatter,
    TableColumn,
)
from bokeh.plotting import figure

from nexrl.driver.dashboard.history import (
    SAMPLE_COLUMNS,
    TIME_PARTS,
    RunHistory,
    metric_columns,
    validation_columns,
)

__all__ = ["REFRESH_MS", "build_document"]

REFRESH_MS = 1000
MAX_SAMPLES = 64  # rows kept in the trajectory table (the newest first)
# the table is redrawn at most this often: each redraw re-renders every row's token
# spans in the browser; the plots stream only their new rows each second
SAMPLES_EVERY_S = 5.0
NO_SELECTION = "Select a trajectory in the table to see its agent trace (model and tool calls)."
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756"]


def _fig(title: str, **kw: Any) -> Any:
    p = figure(title=title, height=260, sizing_mode="stretch_width", **kw)
    p.xaxis.axis_label = "step"
    # the browser fits the ranges to the data after every refresh; synced, each fit is a
    # message back into the scheduler's event loop (~10 a second, measured), where Dask
    # talks to its workers: nothing on the server needs them
    p.x_range.syncable = False
    p.y_range.syncable = False
    return p


def _legend(p: Any) -> None:
    p.legend.location = "top_left"
    p.legend.click_policy = "hide"
    p.legend.label_text_font_size = "8pt"


def _lines(title: str, source: Any, *series: tuple[str, str]) -> Any:
    """A figure with one line per ``(column, label)`` of ``source``, over ``step``."""
    fig = _fig(title)
    for i, (col, label) in enumerate(series):
        fig.line("step", col, source=source, color=PALETTE[i], legend_label=label)
    _legend(fig)
    return fig


def status_html(s: dict[str, Any]) -> str:
    eta = f"{s['eta_s'] / 60:.1f} min" if s["eta_s"] else "-"
    done = s["total"] and s["step"] >= s["total"]
    return (
        f"<b>nexrl</b> &nbsp; recipe <code>{s['recipe'] or '-'}</code> &nbsp; "
        f"experiment <b>{s['experiment'] or '-'}</b> &nbsp; "
        f"step <b>{s['step']}</b> / {s['total'] or '?'} &nbsp; "
        f"{'finished' if done else 'ETA ' + eta}"
    )


def build_document(doc: Any, history: RunHistory) -> None:
    """Fill ``doc`` and keep it current (a periodic callback polls ``history``, which
    belongs to this document: one ``RunHistory`` per browser tab)."""
    metrics = ColumnDataSource(metric_columns(history.rows), name="nexrl-metrics")
    val = ColumnDataSource(validation_columns(history.rows), name="nexrl-validation")
    samples = ColumnDataSource({c: [] for c in SAMPLE_COLUMNS}, name="nexrl-samples")
    status = Div(text="", name="nexrl-status", sizing_mode="stretch_width")
    trace = Div(text=NO_SELECTION, name="nexrl-trace", sizing_mode="stretch_width")

    def show_trace(_attr: str, _old: Any, new: list[int]) -> None:
        rows = samples.data.get("trace_html", [])
        if not new or new[0] >= len(rows):
            trace.text = NO_SELECTION
            return
        html = rows[new[0]]
        trace.text = html or "This trajectory has no trace (not an agent episode)."

    samples.selected.on_change("indices", show_trace)

    reward = _fig("reward (train mean ± std, validation)")
    reward.add_layout(
        Band(base="step", lower="reward_lo", upper="reward_hi", source=metrics, fill_alpha=0.2)
    )
    reward.line("step", "reward_mean", source=metrics, legend_label="train mean", line_width=2)
    reward.scatter("step", "val_reward", source=val, size=8, color="#e45756", legend_label="val")
    _legend(reward)

    timing = _fig("step time (s)")
    timing.vbar_stack(
        [c for c, _ in TIME_PARTS],
        x="step",
        width=0.8,
        source=metrics,
        color=PALETTE[: len(TIME_PARTS)],
        legend_label=[label for _, label in TIME_PARTS],
    )
    _legend(timing)

    versions = _lines(
        "policy versions",
        metrics,
        ("v_trainer", "trainer"),
        ("v_inference", "inference"),
        ("v_rollout_min", "batch oldest"),
        ("v_rollout_max", "batch newest"),
        ("in_flight_at_reload", "in flight at reload"),
    )
    pool = _lines(
        "pool (cumulative groups)",
        metrics,
        ("groups_done", "committed groups"),
        ("failed_groups", "failed groups"),
        ("evaluator_errors", "evaluator errors"),
        ("restarts", "inference restarts"),
        ("in_flight", "in flight (traj)"),
    )
    rate = _lines(
        "throughput", metrics, ("traj_per_s", "trajectories / s"), ("delivered", "delivered")
    )

    colored = HTMLTemplateFormatter(
        template='<div style="background:<%= color %>"><%= value.toFixed(3) %></div>'
    )
    table = DataTable(
        source=samples,
        name="nexrl-samples-table",
        columns=[
            TableColumn(field="step", title="step", width=40),
            TableColumn(field="version", title="version", width=50),
            TableColumn(field="reward", title="reward", formatter=NumberFormatter(format="0.000")),
            TableColumn(field="advantage", title="advantage", formatter=colored),
            TableColumn(field="prompt", title="prompt", width=300),
            TableColumn(
                field="response_html",
                title="response (token background: log-prob)",
                width=500,
                formatter=HTMLTemplateFormatter(template="<%= value %>"),
            ),
        ],
        height=300,
        sizing_mode="stretch_width",
    )

    pending: list[dict[str, Any]] = []  # sample rows not shown yet, oldest first
    table_at, status_text = -SAMPLES_EVERY_S, ""  # last table redraw, last status line

    def refresh() -> None:
        nonlocal table_at, status_text
        new, new_samples, reset = history.poll()
        if reset:
            metrics.data = metric_columns(history.rows)
            val.data = validation_columns(history.rows)
        elif new:
            m = metric_columns(new)
            if m["step"]:
                metrics.stream(m)  # type: ignore[arg-type]
            v = validation_columns(new)
            if v["step"]:
                val.stream(v)  # type: ignore[arg-type]
        pending.extend(new_samples)
        now = time.monotonic()
        if pending and now - table_at >= SAMPLES_EVERY_S:
            rows = (pending[::-1] + _rows(samples.data))[:MAX_SAMPLES]
            samples.data = {c: [r.get(c) for r in rows] for c in SAMPLE_COLUMNS}
            pending.clear()
            table_at = now
        text = status_html(history.status(time.time()))
        if text != status_text:  # the identity line changes once a step at most
            status.text = status_text = text

    refresh()
    doc.title = "nexrl"
    doc.add_root(
        column(
            status,
            row(reward, timing, sizing_mode="stretch_width"),
            row(versions, pool, rate, sizing_mode="stretch_width"),
            table,
            trace,
            sizing_mode="stretch_width",
        )
    )
    doc.add_periodic_callback(refresh, REFRESH_MS)


def _rows(data: Any) -> list[dict[str, Any]]:
    n = len(data.get("step", []))
    return [{c: data[c][i] for c in SAMPLE_COLUMNS} for i in range(n)]
