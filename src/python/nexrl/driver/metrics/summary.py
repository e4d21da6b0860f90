"""End-of-run summary from metrics.jsonl rows: ``summary.json`` plus a few lines of text."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nexrl.core.util.files import atomic_write_text
from nexrl.driver.metrics import learning_signal as ls

__all__ = ["SUMMARY_FILE", "format_summary", "summarize", "write_summary"]

SUMMARY_FILE = "summary.json"
TRAIN_KEY = "reward/mean"
VAL_KEY = "val/reward/mean"
VAL_EVAL_PREFIX = "val/eval/"
WINDOW = 5  # steps averaged at the start and at the end
RUNNING_KEY = "time/running_s"  # written by JsonlSink (seconds spent running)
ZERO_VARIANCE_KEY = "rollout/zero_variance_groups"  # nexrl.driver.metrics.learning_signal
TOP_ANSWER_KEY = "rollout/top_answer_share"
PROMPT_DEPENDENCE_KEY = "rollout/prompt_dependence"
SFT_LOSS_KEY = "actor/sft_loss"  # an SFT run's (nexrl.driver.controller.sft)
VAL_LOSS_KEY = "val/loss"
EXACT_KEY = "val/exact_match"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _is_training_row(row: dict[str, Any]) -> bool:
    """A row with some metric besides validation ones (``val/...``) and the sink's
    own clock (``time``, ``time/running_s``)."""
    return any(k not in ("step", "time") and not k.startswith(("val/", "time/")) for k in row)


def _by_step(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``key`` per step, sorted; a later row for a step wins."""
    points: dict[int, float] = {}
    for row in rows:
        step, value = row.get("step"), _number(row.get(key))
        if isinstance(step, int) and value is not None:
            points[step] = value
    return sorted(points.items())


def _wall_time(rows: list[dict[str, Any]], times: list[float]) -> float | None:
    running = [v for v in (_number(r.get(RUNNING_KEY)) for r in rows) if v is not None]
    if running:
        return max(running)
    return max(times) - min(times) if times else None


def _last_int(rows: list[dict[str, Any]], key: str) -> int | None:
    points = _by_step(rows, key)
    return int(points[-1][1]) if points else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Numbers describing a run from its metrics rows.

    * ``steps_run``, ``first_step``, ``last_step``: distinct training steps (rows
      with only ``val/`` metrics, like a validation before step 1, do not count);
    * ``reward_first5_mean`` / ``reward_last5_mean``: mean ``reward/mean`` over the
      first / last 5 steps that have it (fewer if the run is shorter: ``reward_window``
      steps each);
    * ``val_reward_first`` / ``val_reward_last`` / ``val_reward_best`` and
      ``val_reward_best_step`` from ``val/reward/mean``;
    * ``val_eval_last``: ``{name: value}`` of every ``val/eval/<name>`` (the
      evaluator's metrics over the validation prompts) at the last validation;
    * ``evaluator_errors``: samples whose evaluator raised (the last
      ``rollout/evaluator_errors``), ``evaluator_error_share``: their share of the
      trained samples (mean ``eval/evaluator_error`` over the steps);
    * ``bad_rows_skipped``: data rows the loader skipped (``data.bad_rows=skip``; the
      last ``data/bad_rows_skipped``), ``rows_not_evaluated``: data rows whose every
      sample had an evaluator error (the last ``rollout/rows_not_evaluated``);
    * ``zero_variance_first5`` / ``zero_variance_last5``: the mean share of groups
      whose samples all got the same reward (nothing to learn from) over the first /
      last 5 steps; ``top_answer_first5`` / ``top_answer_last5``: the same for the
      most common answer's share of the samples (near 1: a collapsed policy);
      ``prompt_dependence_first5`` / ``prompt_dependence_last5``: the same for how
      much the answers depend on the prompt (near 0: a policy at chance), over the
      steps that have it;
    * an SFT run's (``mode: sft``): ``sft_loss_first5_mean`` / ``sft_loss_last5_mean``
      (``actor/sft_loss``), ``val_loss_first`` / ``val_loss_last`` / ``val_loss_best``
      and ``val_loss_best_step`` (``val/loss``), ``val_exact_first`` /
      ``val_exact_last`` / ``val_exact_best`` (``val/exact_match``), ``sft_epoch_last``
      (the last ``sft/epoch``: 0 in the first pass over the data);
    * ``wall_time_s``: the time the run spent running: the last
      ``time/running_s`` (the jsonl sink counts it, without the gap between a
      stopped run and its resume); for rows without it, last minus first ``time``.

    Missing values are ``None``.
    """
    steps = sorted(
        {r["step"] for r in rows if isinstance(r.get("step"), int) and _is_training_row(r)}
    )
    reward = [v for _, v in _by_step(rows, TRAIN_KEY)]
    val = _by_step(rows, VAL_KEY)
    val_eval = sorted({k for r in rows for k in r if k.startswith(VAL_EVAL_PREFIX)})
    val_eval_last: dict[str, float] = {}
    for key in val_eval:
        points = _by_step(rows, key)
        if points and val and points[-1][0] == val[-1][0]:
            val_eval_last[key.removeprefix(VAL_EVAL_PREFIX)] = points[-1][1]
    times = [t for t in (_number(r.get("time")) for r in rows) if t is not None]
    errors = [v for _, v in _by_step(rows, "rollout/evaluator_errors")]
    zero_var = [v for _, v in _by_step(rows, ZERO_VARIANCE_KEY)]
    top_answer = [v for _, v in _by_step(rows, TOP_ANSWER_KEY)]
    dependence = [v for _, v in _by_step(rows, PROMPT_DEPENDENCE_KEY)]
    error_share = [v for _, v in _by_step(rows, "eval/evaluator_error")]
    return {
        "steps_run": len(steps),
        "first_step": steps[0] if steps else None,
        "last_step": steps[-1] if steps else None,
        "reward_window": min(WINDOW, len(reward)),  # steps each of the two means covers
        "reward_first5_mean": _mean(reward[:WINDOW]),
        "reward_last5_mean": _mean(reward[-WINDOW:]),
        **_validated(val, "val_reward", max),
        "val_eval_last": val_eval_last,
        "evaluator_errors": int(max(errors)) if errors else None,
        "evaluator_error_share": _mean(error_share),
        "bad_rows_skipped": _last_int(rows, "data/bad_rows_skipped"),
        "rows_not_evaluated": _last_int(rows, "rollout/rows_not_evaluated"),
        "zero_variance_first5": _mean(zero_var[:WINDOW]),
        "zero_variance_last5": _mean(zero_var[-WINDOW:]),
        "top_answer_first5": _mean(top_answer[:WINDOW]),
        "top_answer_last5": _mean(top_answer[-WINDOW:]),
        "prompt_dependence_first5": _mean(dependence[:WINDOW]),
        "prompt_dependence_last5": _mean(dependence[-WINDOW:]),
        **_sft(rows),
        "wall_time_s": _wall_time(rows, times),
    }


def _validated(
    points: list[tuple[int, float]], name: str, better: Callable[..., tuple[int, float]]
) -> dict[str, Any]:
    """``<name>_first`` / ``_last`` / ``_best`` / ``_best_step`` of ``(step, value)``
    points; ``better`` (``max`` or ``min``) picks the best."""
    best = better(points, key=lambda p: p[1]) if points else None
    return {
        f"{name}_first": points[0][1] if points else None,
        f"{name}_last": points[-1][1] if points else None,
        f"{name}_best": best[1] if best else None,
        f"{name}_best_step": best[0] if best else None,
    }


def _sft(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The SFT fields of ``summarize`` (all None for an RL run)."""
    loss = [v for _, v in _by_step(rows, SFT_LOSS_KEY)]
    exact = [v for _, v in _by_step(rows, EXACT_KEY)]
    epochs = _by_step(rows, "sft/epoch")
    return {
        "sft_loss_first5_mean": _mean(loss[:WINDOW]),
        "sft_loss_last5_mean": _mean(loss[-WINDOW:]),
        **_validated(_by_step(rows, VAL_LOSS_KEY), "val_loss", min),
        "val_exact_first": exact[0] if exact else None,
        "val_exact_last": exact[-1] if exact else None,
        "val_exact_best": max(exact) if exact else None,
        "sft_epoch_last": epochs[-1][1] if epochs else None,
    }


def _duration(seconds: float) -> str:
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m:02d}m {sec:02d}s"
    return f"{m}m {sec:02d}s" if m else f"{sec}s"


def _steps(n: int) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _stuck(s: dict[str, Any]) -> bool:
    """Nearly no group to learn from at the end, one answer for most samples, or
    answers that ignore the prompt with a flat reward, while the reward is short of
    solved (the learning-signal warnings' thresholds)."""
    reward = s.get("reward_last5_mean")
    if reward is None or reward >= ls.SOLVED_REWARD:
        return False
    dependence = s.get("prompt_dependence_last5")
    flat = abs(reward - (s.get("reward_first5_mean") or 0.0)) <= ls.FLAT_REWARD
    return bool(
        s["zero_variance_last5"] >= ls.NO_SIGNAL_SHARE
        or (s.get("top_answer_last5") or 0.0) >= ls.COLLAPSE_SHARE
        or (dependence is not None and dependence < ls.AT_CHANCE_DEPENDENCE and flat)
    )


def format_summary(summary: dict[str, Any]) -> str:
    """A few human-readable lines for a ``summarize`` result."""
    s = summary
    if not s["steps_run"]:
        lines = ["no training steps logged"]
    else:
        wall = s["wall_time_s"]
        lines = [
            f"steps: {s['steps_run']} ({s['first_step']} -> {s['last_step']})"
            + (f", wall time {_duration(wall)}" if wall is not None else "")
        ]
    if s.get("parent"):
        from nexrl.core.util.run_parent import describe_parent

        lines.append(f"started from: {describe_parent(s['parent'])} (parent.json)")
    if s["reward_first5_mean"] is not None:
        lines.append(
            f"reward (mean of {_steps(s.get('reward_window', WINDOW))}): "
            f"{_f(s['reward_first5_mean'])} at the start -> {_f(s['reward_last5_mean'])} at the end"
        )
    if s["val_reward_first"] is not None:
        lines.append(
            f"validation reward: {_f(s['val_reward_first'])} first -> "
            f"{_f(s['val_reward_last'])} last, best {_f(s['val_reward_best'])} "
            f"at step {s['val_reward_best_step']}"
        )
    if s.get("sft_loss_first5_mean") is not None:
        lines.append(
            f"SFT loss (mean of {_steps(min(WINDOW, s['steps_run']))}): "
            f"{_f(s['sft_loss_first5_mean'])} at the start -> {_f(s['sft_loss_last5_mean'])} "
            f"at the end"
            + (
                f", ending in pass {int(s['sft_epoch_last']) + 1} over the data"
                if s.get("sft_epoch_last") is not None
                else ""
            )
        )
    if s.get("val_loss_first") is not None:
        lines.append(
            f"validation loss: {_f(s['val_loss_first'])} first -> {_f(s['val_loss_last'])} "
            f"last, best {_f(s['val_loss_best'])} at step {s['val_loss_best_step']}"
        )
    if s.get("val_exact_first") is not None:
        lines.append(
            f"validation exact match (greedy): {_f(s['val_exact_first'])} first -> "
            f"{_f(s['val_exact_last'])} last, best {_f(s['val_exact_best'])}"
        )
    if s.get("zero_variance_first5") is not None:
        lines.append(
            f"learning signal: groups with no reward variance {s['zero_variance_first5']:.0%}"
            f" -> {s['zero_variance_last5']:.0%}, most common answer "
            f"{s['top_answer_first5']:.0%} -> {s['top_answer_last5']:.0%} of the samples"
            + (
                f", answers' dependence on the prompt {s['prompt_dependence_first5']:.2f} -> "
                f"{s['prompt_dependence_last5']:.2f} (0: at chance)"
                if s.get("prompt_dependence_last5") is not None
                else ""
            )
            + (' (see "When it does not learn" in docs/user-guide.md)' if _stuck(s) else "")
        )
    own = {k: v for k, v in (s.get("val_eval_last") or {}).items() if k != "evaluator_error"}
    if own:  # the evaluator's own metrics (evaluator_error is the worker's count)
        shown = ", ".join(f"{k} {_f(v)}" for k, v in own.items())
        lines.append(f"validation evaluator metrics (last): {shown}")
    if s.get("evaluator_errors"):
        share = s.get("evaluator_error_share")
        lines.append(
            f"evaluator errors: {s['evaluator_errors']}"
            + (f" ({share:.1%} of trained samples)" if share is not None else "")
            + "; each one is in logs/dask-worker-*.log"
        )
    if s.get("rows_not_evaluated"):
        lines.append(
            f"data rows that could not be evaluated (every sample an evaluator error): "
            f"{s['rows_not_evaluated']}; each is named (file, line) in logs/driver.log"
        )
    if s.get("bad_rows_skipped"):
        lines.append(
            f"bad data rows skipped (data.bad_rows=skip): {s['bad_rows_skipped']}; each is "
            "named (file, line) in logs/driver.log"
        )
    return "\n".join(lines)


def write_summary(output_dir: str | Path, rows: list[dict[str, Any]]) -> str:
    """Write ``<output_dir>/summary.json`` (atomically) and return its text form; a run
    that started from another run's snapshot has its ``parent.json`` in it as ``parent``
    (and a "started from" line)."""
    from nexrl.core.util.run_parent import read_parent

    summary = summarize(rows)
    parent = read_parent(output_dir)  # staged training: the run whose snapshot it started from
    if parent is not None:
        summary["parent"] = parent
    out = Path(output_dir) / SUMMARY_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
    atomic_write_text(out, text, fsync=False, fsync_parent=False)
    return format_summary(summary)
