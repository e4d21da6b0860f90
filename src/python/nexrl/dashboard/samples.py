"""A few trajectories of each trained batch, decoded, for the page's table.

The driver appends ``SAMPLES_PER_STEP`` rows per step to ``<run>/samples.jsonl``
(step, policy version, reward, advantage, prompt, response). The response is kept
as HTML: one span per token, its background by the token's sampling log-prob
(white: certain, orange: unlikely), so a user sees at a glance what the policy was
unsure of. The advantage is the group-relative one GRPO trains on before scaling,
``A_i = r_i - mean(r_group)``, computed over the whole batch at once.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SAMPLES_PER_STEP", "advantage_color", "append_samples", "sample_rows"]

SAMPLES_PER_STEP = 8
MAX_TOKENS = 256  # tokens shown per response (the rest is elided)


def group_advantages(reward: np.ndarray, group_id: np.ndarray) -> np.ndarray:
    """``r_i - mean(r_group(i))``, vectorized over the batch."""
    _, inv = np.unique(group_id, return_inverse=True)
    sums = np.bincount(inv, weights=reward)
    counts = np.bincount(inv)
    return np.asarray(reward - (sums / counts)[inv], dtype=np.float64)


def advantage_color(a: float, scale: float = 1.0) -> str:
    """Green for a positive advantage, red for a negative one; stronger when larger."""
    if not np.isfinite(a) or scale <= 0:
        return "rgba(0,0,0,0)"
    alpha = min(1.0, abs(a) / scale) * 0.6
    return f"rgba(40,160,60,{alpha:.2f})" if a > 0 else f"rgba(210,50,50,{alpha:.2f})"


def token_html(tokens: Sequence[str], logprobs: Sequence[float]) -> str:
    """One span per token, background by log-prob (title: the log-prob)."""
    out = []
    for tok, lp in zip(tokens[:MAX_TOKENS], logprobs[:MAX_TOKENS], strict=False):
        unsure = min(1.0, max(0.0, -float(lp) / 5.0))  # lp 0 -> white, lp <= -5 -> orange
        out.append(
            f'<span title="logprob {float(lp):.2f}" '
            f'style="background:rgba(255,140,0,{unsure * 0.7:.2f})">{html.escape(tok)}</span>'
        )
    if len(tokens) > MAX_TOKENS:
        out.append(f"… (+{len(tokens) - MAX_TOKENS} tokens)")
    return "".join(out)


def sample_rows(
    cols: Any,
    step: int,
    decode: Callable[[list[int]], str],
    decode_tokens: Callable[[list[int]], list[str]],
    k: int = SAMPLES_PER_STEP,
) -> list[dict[str, Any]]:
    """The first ``k`` trajectories of ``cols`` (pool ``TrajectoryColumns``) as rows."""
    reward = np.asarray(cols.reward, dtype=np.float64)
    adv = group_advantages(reward, np.asarray(cols.group_id))
    scale = float(np.abs(adv).max()) if len(adv) else 1.0
    p_off = np.concatenate([[0], np.cumsum(cols.prompt_lens)])
    r_off = np.concatenate([[0], np.cumsum(cols.response_lens)])
    rows = []
    for i in range(min(k, len(reward))):
        p_ids = [int(t) for t in cols.prompt_ids[p_off[i] : p_off[i + 1]]]
        r_ids = [int(t) for t in cols.response_ids[r_off[i] : r_off[i + 1]]]
        lps = [float(x) for x in cols.logprobs[r_off[i] : r_off[i + 1]]]
        rows.append(
            {
                "step": int(step),
                "version": int(cols.policy_version[i]),
                "reward": float(reward[i]),
                "advantage": float(adv[i]),
                "prompt": decode(p_ids),
                "response_html": token_html(decode_tokens(r_ids), lps),
                "color": advantage_color(float(adv[i]), scale),
            }
        )
    return rows


def append_samples(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows to samples.jsonl (one JSON object a line)."""
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
