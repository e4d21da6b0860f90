"""``ProgressDisplay``: training progress for a person watching the run.

On a terminal it is a tqdm bar: ``train 3/100 |#   | 00:41 eta 22:30,
reward=0.412 traj/s=12.5 staleness=1 exact=0.25`` (the step, the time so far and
the time left, then the mean reward, the throughput, the policy staleness ``version/lag_max``
and up to three evaluator metrics ``eval/<name>``; ``nan_skipped=N`` once a
step's update was skipped for a NaN/inf loss). When the stream is not a
terminal (CI logs, ``nohup``, a file) a bar would be unreadable, so one plain
line is printed per step instead, with the same fields:
``step 3/100 reward=0.412 traj/s=12.5 staleness=1 elapsed=41s eta=1350s``. A
terminal that reports no size (a bare pseudo-terminal: tqdm would draw nothing)
gets a bar 160 columns wide. A narrower terminal cuts the line at its width.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["ProgressDisplay"]

# (metric, label, format) shown when present, in this order
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("reward/mean", "reward", ".3f"),
    ("val/reward/mean", "val_reward", ".3f"),
    ("perf/trajectories_per_s", "traj/s", ".1f"),
    ("version/lag_max", "staleness", "g"),
    ("actor/sft_loss", "loss", ".4f"),  # mode: sft
    ("val/loss", "val_loss", ".4f"),
)
NONFINITE_TOTAL = "train/skipped_nonfinite_total"  # shown as nan_skipped=N once above 0
EVAL_PREFIX = "eval/"
EVAL_SHOWN = 3  # evaluator metrics shown (eval/<name>, first by name), errors always
BAR_FORMAT = "train {n_fmt}/{total_fmt} |{bar:12}| {elapsed} eta {remaining}{postfix}"
FALLBACK_COLUMNS = 160


FALLBACK_ROWS = 24


def _has_size(stream: TextIO) -> bool:
    """Whether the terminal reports its size (a bare pseudo-terminal reports 0 x 0, and
    tqdm then draws nothing at all)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return size.columns > 0 and size.lines > 0


def _eval_fields(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    names = sorted(k for k in metrics if k.startswith(EVAL_PREFIX))
    out = []
    errors = metrics.get(EVAL_PREFIX + "evaluator_error")
    shown = [k for k in names if k != EVAL_PREFIX + "evaluator_error"][:EVAL_SHOWN]
    for key in shown:
        out.append((key[len(EVAL_PREFIX) :], format(float(metrics[key]), ".3g")))
    if errors:  # only when some sample's evaluator raised
        out.append(("eval_errors", format(float(errors), ".0%")))
    return out


def _fields(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    out = []
    for key, label, spec in FIELDS:
        value = metrics.get(key)
        if value is not None:
            out.append((label, format(float(value), spec)))
    skipped = metrics.get(NONFINITE_TOTAL)
    if skipped:  # only once a step's update was skipped for a NaN/inf loss
        out.append(("nan_skipped", format(float(skipped), "g")))
    return out + _eval_fields(metrics)


class ProgressDisplay:
    """Progress of ``total_steps`` training steps, starting after ``initial_step``.

    ``enabled`` chooses the tqdm bar (True) or plain lines (False); ``None``
    (default) draws the bar only when ``stream`` is a TTY. ``stream`` defaults
    to ``sys.stderr`` at construction time.
    """

    def __init__(
        self,
        total_steps: int,
        initial_step: int = 0,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.log = log  # also gets every line shown (a run's driver.log: step by step)
        self.total_steps = int(total_steps)
        self.step = self.initial_step = int(initial_step)
        self.stream: TextIO = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self._started = time.monotonic()
        self._first_done: tuple[float, int] | None = None  # (when, steps): the first update
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            sized = _has_size(self.stream)
            self._bar = tqdm(
                total=self.total_steps,
                initial=self.step,
                file=self.stream,
                desc="train",
                unit="step",
                bar_format=BAR_FORMAT,
                dynamic_ncols=sized,  # follows a resized terminal
                ncols=None if sized else FALLBACK_COLUMNS,
                nrows=None if sized else FALLBACK_ROWS,
            )

    @property
    def uses_bar(self) -> bool:
        """Whether progress is drawn as a tqdm bar (else plain lines)."""
        return self._bar is not None

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        """Show that ``step`` finished with ``metrics``."""
        fields = _fields(metrics or {})
        self.step = int(step)
        elapsed = time.monotonic() - self._started
        parts = [f"step {self.step}/{self.total_steps}"]
        parts += [f"{label}={text}" for label, text in fields]
        parts.append(f"elapsed={elapsed:.0f}s")
        done = self.step - self.initial_step
        left = max(0, self.total_steps - self.step)
        now = time.monotonic()
        if done == 1 or self._first_done is None:  # its time includes the start (a resume's
            self._first_done = (now, done)  # checkpoint load): only a first guess
            if done > 0:
                parts.append(f"eta={elapsed / done * left:.0f}s")
        else:  # the pace since the first step done here
            t0, d0 = self._first_done
            parts.append(f"eta={(now - t0) / max(1, done - d0) * left:.0f}s")
        if self.log is not None:
            self.log.info("%s", " ".join(parts))
        if self._bar is not None:
            if self.step > self._bar.n:
                self._bar.update(self.step - self._bar.n)
            self._bar.set_postfix_str(" ".join(f"{label}={text}" for label, text in fields))
            return
        print(" ".join(parts), file=self.stream, flush=True)

    def write(self, msg: str, level: int = logging.INFO) -> None:
        """Print ``msg`` on its own line without breaking the bar (and log it at
        ``level``)."""
        if self.log is not None:
            self.log.log(level, "%s", msg)
        if self._bar is not None:
            self._bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def warn(self, text: str) -> None:
        """``warning: <text>`` on its own line, and a WARNING record in the log. The one
        way a run's warning reaches the terminal: the line is not also logged to a
        logger the terminal shows, which printed it twice."""
        self.write(f"warning: {text}", level=logging.WARNING)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
