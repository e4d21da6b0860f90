"""A few trajectories of each trained batch, decoded, for the page's table.

The driver appends ``SAMPLES_PER_STEP`` rows per step to ``<run>/samples.jsonl``
(step, policy version, reward, advantage, prompt, response). The response is kept
as HTML: one span per token, its background by the token's sampling log-prob
(white: certain, orange: unlikely), so a user sees at a glance what the policy was
unsure of. The advantage is the group-relative one GRPO trains on before scaling,
``A_i = r_i - mean(r_group)``, computed over the whole batch at once. An agent
episode's trace (``nexrl.core.types.trace``: its model and tool calls) is kept as an HTML
table, ``trace_html``, which the page shows for the selected row.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SAMPLES_PER_STEP", "advantage_color", "append_samples", "sample_rows", "trace_html"]

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


def trace_html(spans: Sequence[dict[str, Any]]) -> str:
    """An episode's spans as an HTML table ('' when it has none); a failed call's row
    is red, with its error."""
    if not spans:
        return ""
    head = "".join(
        f"<th>{h}</th>" for h in ("kind", "name", "start (s)", "took (s)", "tokens", "detail")
    )
    rows = []
    for s in spans:
        if s.get("kind") == "llm":
            tokens = f"{s.get('prompt_tokens', 0)} + {s.get('completion_tokens', 0)}"
            detail = f"finish: {s.get('finish_reason')}, tool calls: {s.get('tool_calls', 0)}"
        else:
            tokens = ""
            detail = f"args {json.dumps(s.get('arguments'))[:200]} -> {str(s.get('result'))[:200]}"
        error = s.get("error")
        style = ' style="background:rgba(210,50,50,0.25)"' if error else ""
        cells = (
            s.get("kind", ""),
            s.get("name", ""),
            f"{float(s.get('start_s', 0.0)):.3f}",
            f"{float(s.get('duration_s', 0.0)):.3f}",
            tokens,
            f"error: {error}" if error else detail,
        )
        rows.append(f"<tr{style}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells))
    return f'<table class="nexrl-trace"><tr>{head}</tr>{"</tr>".join(rows)}</tr></table>'


def _trace_of_row(cols: Any, i: int) -> list[dict[str, Any]]:
    """Row ``i``'s spans: ``extra_info["trace"]`` of its meta JSON (``nexrl.core.types.trace``,
    a layer above this package, writes them)."""
    meta = getattr(cols, "meta", None)
    if meta is None:
        return []
    try:
        spans = (json.loads(meta(i)).get("extra_info") or {}).get("trace")
    except (ValueError, AttributeError):
        return []
    return list(spans) if isinstance(spans, list) else []


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
                "response": decode(r_ids),
                "response_html": token_html(decode_tokens(r_ids), lps),
                "color": advantage_color(float(adv[i]), scale),
                "trace_html": trace_html(_trace_of_row(cols, i)),
            }
        )
    return rows


def append_samples(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows to samples.jsonl (one JSON object a line)."""
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
