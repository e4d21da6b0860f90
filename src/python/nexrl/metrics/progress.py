"""``ProgressDisplay``: training progress for a person watching the run.

On a terminal it is a tqdm bar whose postfix shows the step, the mean reward,
the throughput and the policy staleness. When the stream is not a terminal
(CI logs, ``nohup``, a file) a bar would be unreadable, so one plain line is
printed per step instead: ``step 3/100 reward=0.412 traj/s=12.5 lag=1``.
"""

from __future__ import annotations

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
    ("version/lag_max", "lag", "g"),
    ("actor/sft_loss", "loss", ".4f"),  # mode: sft
    ("val/loss", "val_loss", ".4f"),
)
EVAL_PREFIX = "eval/"
EVAL_SHOWN = 3  # evaluator metrics shown (eval/<name>, first by name), errors always


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
    ) -> None:
        self.total_steps = int(total_steps)
        self.step = int(initial_step)
        self.stream: TextIO = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self._started = time.monotonic()
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total_steps,
                initial=self.step,
                file=self.stream,
                desc="train",
                unit="step",
                dynamic_ncols=True,
            )

    @property
    def uses_bar(self) -> bool:
        """Whether progress is drawn as a tqdm bar (else plain lines)."""
        return self._bar is not None

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        """Show that ``step`` finished with ``metrics``."""
        fields = _fields(metrics or {})
        self.step = int(step)
        if self._bar is not None:
            if self.step > self._bar.n:
                self._bar.update(self.step - self._bar.n)
            postfix = [f"step={self.step}", *(f"{label}={text}" for label, text in fields)]
            self._bar.set_postfix_str(" ".join(postfix))
            return
        elapsed = time.monotonic() - self._started
        parts = [f"step {self.step}/{self.total_steps}"]
        parts += [f"{label}={text}" for label, text in fields]
        parts.append(f"elapsed={elapsed:.0f}s")
        print(" ".join(parts), file=self.stream, flush=True)

    def write(self, msg: str) -> None:
        """Print ``msg`` on its own line without breaking the bar."""
        if self._bar is not None:
            self._bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
