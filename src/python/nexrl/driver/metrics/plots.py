"""Reward curve PNG from metrics.jsonl rows (matplotlib, Agg, no display needed).

The top panel has the training and validation reward; when the rows carry
evaluator metrics (``eval/<name>``, the step's mean of each metric the
evaluator returned), a second panel below plots each of them per step (a line)
and at each validation (``val/eval/<name>``: markers of the same colour). When
they carry the learning signal (``nexrl.driver.metrics.learning_signal``), a last panel
plots the share of groups without reward variance and the most common answer's
share per step: the two numbers that say a run has nothing to learn from. The
policy's entropy (``actor/entropy``) has a panel of its own. ``eval/evaluator_error``
(the share of samples whose evaluator raised) is not one of the evaluator's metrics:
it is drawn in the learning-signal panel. Legends sit right of their panels, off the
curves.

An SFT run (``mode: sft``) has no reward: ``sft_figure`` plots its training loss
(``actor/sft_loss``) with the validation loss (``val/loss``) and, below, the share of
held-out conversations answered exactly (``val/exact_match``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeGuard

from nexrl.core.util.files import atomic_path

__all__ = [
    "EVAL_PREFIX",
    "VAL_PREFIX",
    "plot_reward_curve",
    "plot_sft_curve",
    "plotted",
    "reward_figure",
    "sft_figure",
]

TRAIN_KEY = "reward/mean"
VAL_KEY = "val/reward/mean"
EVAL_PREFIX = "eval/"
VAL_EVAL_PREFIX = "val/eval/"
VAL_PREFIX = "val/"  # every validation metric's
SIGNAL_KEYS = (
    ("rollout/zero_variance_groups", "groups without reward variance"),
    ("rollout/top_answer_share", "most common answer's share"),
    ("rollout/prompt_dependence", "answers' dependence on the prompt (0: at chance)"),
    ("eval/evaluator_error", "samples whose evaluator raised"),
)
ENTROPY_KEY = "actor/entropy"
SFT_LOSS_KEY = "actor/sft_loss"
VAL_LOSS_KEY = "val/loss"
EXACT_KEY = "val/exact_match"
NOT_EVALUATOR = ("evaluator_error",)  # eval/<name> the worker adds, not the evaluator
LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": "small"}


def finite_number(v: Any) -> TypeGuard[int | float]:
    """A metric value worth plotting: an int or float (not a bool), finite."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = {}
    for row in rows:
        value, step = row.get(key), row.get("step")
        if isinstance(step, int) and finite_number(value):
            points[step] = float(value)  # a step logged twice (resume): the later row wins
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def _eval_keys(rows: list[dict[str, Any]]) -> list[str]:
    """The evaluator metrics' names (``<name>`` of ``eval/<name>`` or ``val/eval/<name>``)."""
    keys = {k for row in rows for k in row}
    names = {k.removeprefix(EVAL_PREFIX) for k in keys if k.startswith(EVAL_PREFIX)} | {
        k.removeprefix(VAL_EVAL_PREFIX) for k in keys if k.startswith(VAL_EVAL_PREFIX)
    }
    return sorted(names - set(NOT_EVALUATOR))


def plotted(key: str) -> bool:
    """Whether ``reward_figure`` draws metric ``key`` (besides ``step``)."""
    return (
        key in (TRAIN_KEY, VAL_KEY, ENTROPY_KEY, SFT_LOSS_KEY, VAL_LOSS_KEY, EXACT_KEY)
        or key.startswith((EVAL_PREFIX, VAL_EVAL_PREFIX))
        or any(key == k for k, _ in SIGNAL_KEYS)
    )


def reward_figure(rows: list[dict[str, Any]], *, title: str | None = None) -> Any:
    """The ``matplotlib.figure.Figure`` ``plot_reward_curve`` saves: training
    ``reward/mean`` (line) and ``val/reward/mean`` (markers) against ``step`` and,
    below, one line per ``eval/<name>`` metric (labelled ``<name>``) and markers of
    its ``val/eval/<name>`` (labelled ``val <name>``); ``None`` when no row has a
    reward or an evaluator metric."""
    train_steps, train = _series(rows, TRAIN_KEY)
    val_steps, val = _series(rows, VAL_KEY)
    evals = [
        (name, _series(rows, EVAL_PREFIX + name), _series(rows, VAL_EVAL_PREFIX + name))
        for name in _eval_keys(rows)
    ]
    evals = [e for e in evals if e[1][0] or e[2][0]]
    signal = [(label, _series(rows, key)) for key, label in SIGNAL_KEYS]
    signal = [(label, points) for label, points in signal if points[0]]
    entropy = _series(rows, ENTROPY_KEY)
    if not train and not val and not evals:
        return None

    panels = 1 + bool(evals) + bool(signal) + bool(entropy[0])
    fig = _figure(panels)
    ax = fig.add_subplot(panels, 1, 1)
    if train:
        ax.plot(train_steps, train, color="tab:blue", linewidth=1.5, label="train reward/mean")
    if val:
        ax.plot(
            val_steps,
            val,
            linestyle="none",
            marker="o",
            color="tab:orange",
            label="validation reward/mean",
        )
    ax.set_title(title or "Reward")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.grid(True, alpha=0.3)
    if train or val:
        ax.legend(**LEGEND)
    if evals:
        ev = fig.add_subplot(panels, 1, 2, sharex=ax)
        for i, (name, (steps, values), (v_steps, v_values)) in enumerate(evals):
            color = f"C{i % 10}"
            if steps:
                ev.plot(steps, values, linewidth=1.2, color=color, label=name)
            if v_steps:
                ev.plot(
                    v_steps,
                    v_values,
                    linestyle="none",
                    marker="o",
                    markersize=4,
                    color=color,
                    label=f"val {name}",
                )
        ev.set_title("Evaluator metrics (mean per step; markers: validation)")
        ev.set_xlabel("step")
        ev.set_ylabel("eval/<name>")
        ev.grid(True, alpha=0.3)
        ev.legend(**LEGEND)
    if entropy[0]:
        ent = fig.add_subplot(panels, 1, 1 + bool(evals) + 1, sharex=ax)
        ent.plot(*entropy, linewidth=1.2, color="tab:purple", label="policy entropy")
        ent.set_title("Policy entropy (actor/entropy, nats per token)")
        ent.set_xlabel("step")
        ent.grid(True, alpha=0.3)
        ent.legend(**LEGEND)
    if signal:
        sig = fig.add_subplot(panels, 1, panels, sharex=ax)
        for label, (steps, values) in signal:
            sig.plot(steps, values, linewidth=1.2, label=label)
        sig.set_ylim(-0.05, 1.05)
        sig.set_title("Learning signal (share of the step's batch)")
        sig.set_xlabel("step")
        sig.grid(True, alpha=0.3)
        sig.legend(**LEGEND)
    fig.tight_layout()
    return fig


def _figure(panels: int) -> Any:
    """An Agg figure for ``panels`` stacked panels, room on the right for legends."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 4 + 2.5 * (panels - 1)), dpi=100)
    FigureCanvasAgg(fig)  # explicit Agg canvas: no pyplot, no global backend switch
    return fig


def sft_figure(rows: list[dict[str, Any]], *, title: str | None = None) -> Any:
    """An SFT run's figure: ``actor/sft_loss`` (line) and ``val/loss`` (markers) per
    step and, when the rows have it, ``val/exact_match`` below; ``None`` when no row
    has a loss."""
    train = _series(rows, SFT_LOSS_KEY)
    val = _series(rows, VAL_LOSS_KEY)
    exact = _series(rows, EXACT_KEY)
    if not train[0] and not val[0]:
        return None
    panels = 1 + bool(exact[0])
    fig = _figure(panels)
    ax = fig.add_subplot(panels, 1, 1)
    if train[0]:
        ax.plot(*train, color="tab:blue", linewidth=1.5, label="train loss (actor/sft_loss)")
    if val[0]:
        ax.plot(*val, linestyle="none", marker="o", color="tab:orange", label="validation loss")
    ax.set_title(title or "SFT loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss per label token")
    ax.grid(True, alpha=0.3)
    ax.legend(**LEGEND)
    if exact[0]:
        ex = fig.add_subplot(panels, 1, 2, sharex=ax)
        ex.plot(*exact, marker="o", color="tab:green", label="exact match (greedy)")
        ex.set_ylim(-0.05, 1.05)
        ex.set_title("Held-out conversations answered exactly (val/exact_match)")
        ex.set_xlabel("step")
        ex.grid(True, alpha=0.3)
        ex.legend(**LEGEND)
    fig.tight_layout()
    return fig


def plot_reward_curve(
    rows: list[dict[str, Any]], out_png: Path, *, title: str | None = None
) -> Path | None:
    """Save ``reward_figure(rows)`` into ``out_png``, replacing it atomically. Returns
    the path, or ``None`` (and writes nothing) when there is nothing to plot."""
    return _save(reward_figure(rows, title=title), out_png)


def plot_sft_curve(
    rows: list[dict[str, Any]], out_png: Path, *, title: str | None = None
) -> Path | None:
    """Save ``sft_figure(rows)`` into ``out_png`` (as ``plot_reward_curve``)."""
    return _save(sft_figure(rows, title=title), out_png)


def _save(fig: Any, out_png: Path) -> Path | None:
    if fig is None:
        return None
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_png, fsync=False, fsync_parent=False) as tmp:
        fig.savefig(tmp, format="png")
    return out_png
