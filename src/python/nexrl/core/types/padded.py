"""Trajectories (objects or the pool's columns) -> the padded tensors of a ``Batch``,
and the column padding ``Batch`` applies to them (layout: ``nexrl.core.types.batch``).

``padded_from_trajectories`` and ``padded_from_columns`` return the same
``(tensors, meta)`` for the same rows: prompts left-padded, responses
right-padded, the per-row tensors and the per-row meta lists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from nexrl.core.types.columns import Columns
from nexrl.core.types.trajectory import Trajectory

FULL_KEYS = ("input_ids", "attention_mask", "position_ids")
PROMPT_KEYS = ("prompts",)
RESPONSE_KEYS = ("responses", "response_mask", "old_log_probs", "behaviour_log_probs")
ID_KEYS = ("input_ids", "prompts", "responses")  # padded with pad_token_id, others with 0
META_KEYS = ("metrics", "extra_info", "data_item")  # the per-row meta of a trajectory

Padded = tuple[dict[str, torch.Tensor], dict[str, Any]]


class _Blocks:
    """The prompt block (``b x p``, filled from the right) and the response block
    (``b x r``, filled from the left) of a batch, padding everywhere until filled."""

    def __init__(self, b: int, p: int, r: int, pad_token_id: int) -> None:
        self.prompts = torch.full((b, p), pad_token_id, dtype=torch.int64)
        self.prompt_valid = torch.zeros((b, p), dtype=torch.int64)
        self.responses = torch.full((b, r), pad_token_id, dtype=torch.int64)
        self.response_valid = torch.zeros((b, r), dtype=torch.int64)
        self.response_mask = torch.zeros((b, r), dtype=torch.int64)
        self.logp = torch.zeros((b, r), dtype=torch.float32)

    def layout(self, **per_row: torch.Tensor) -> dict[str, torch.Tensor]:
        """The batch's tensors from the filled blocks, plus ``per_row``."""
        attention_mask = torch.cat([self.prompt_valid, self.response_valid], dim=1)
        return {
            "input_ids": torch.cat([self.prompts, self.responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids_from_mask(attention_mask),
            "prompts": self.prompts,
            "responses": self.responses,
            "response_mask": self.response_mask,
            "old_log_probs": self.logp,
            "behaviour_log_probs": self.logp.clone(),
            **per_row,
        }


def _meta(rows: Sequence[Any], get: Callable[[Any, str], Any]) -> dict[str, Any]:
    return {k: [dict(get(row, k)) for row in rows] for k in META_KEYS}


def padded_from_trajectories(trajs: Sequence[Trajectory], pad_token_id: int) -> Padded:
    """``(tensors, meta)`` of ``trajs`` (at least one)."""
    p = max(len(t.prompt_ids) for t in trajs)
    r = max(len(t.response_ids) for t in trajs)
    blocks = _Blocks(len(trajs), p, r, pad_token_id)
    for i, t in enumerate(trajs):
        lp, lr = len(t.prompt_ids), len(t.response_ids)
        blocks.prompts[i, p - lp :] = torch.as_tensor(t.prompt_ids, dtype=torch.int64)
        blocks.prompt_valid[i, p - lp :] = 1
        blocks.responses[i, :lr] = torch.as_tensor(t.response_ids, dtype=torch.int64)
        blocks.response_valid[i, :lr] = 1
        blocks.response_mask[i, :lr] = torch.as_tensor(t.loss_mask, dtype=torch.int64)
        blocks.logp[i, :lr] = torch.as_tensor(t.logprobs, dtype=torch.float32)
    tensors = blocks.layout(
        rewards=torch.tensor([float(t.reward) for t in trajs], dtype=torch.float32),
        group_ids=torch.tensor([t.group_id for t in trajs], dtype=torch.int64),
        run_ids=torch.tensor([t.run_id for t in trajs], dtype=torch.int64),
        policy_versions=torch.tensor([t.policy_version for t in trajs], dtype=torch.int64),
    )
    return tensors, _meta(trajs, getattr)


def padded_from_columns(cols: Columns, pad_token_id: int) -> Padded:
    """``(tensors, meta)`` of the pool's columns (at least one row), without a
    ``Trajectory`` per row."""
    plens = np.asarray(cols.prompt_lens, dtype=np.int64)
    rlens = np.asarray(cols.response_lens, dtype=np.int64)
    p, r = int(plens.max()), int(rlens.max())
    # (row, column) of every flat token: prompts end at column p, responses start at 0
    prow, pcol = _ragged_positions(plens)
    pcol += np.repeat(p - plens, plens)
    rrow, rcol = _ragged_positions(rlens)
    blocks = _Blocks(len(cols), p, r, pad_token_id)
    pi, pj = torch.from_numpy(prow), torch.from_numpy(pcol)
    ri, rj = torch.from_numpy(rrow), torch.from_numpy(rcol)
    blocks.prompts[pi, pj] = _tensor(cols.prompt_ids, np.int64)
    blocks.prompt_valid[pi, pj] = 1
    blocks.responses[ri, rj] = _tensor(cols.response_ids, np.int64)
    blocks.response_valid[ri, rj] = 1
    blocks.response_mask[ri, rj] = _tensor(cols.loss_mask, np.int64)
    blocks.logp[ri, rj] = _tensor(cols.logprobs, np.float32)
    tensors = blocks.layout(
        rewards=_tensor(cols.reward, np.float32),
        group_ids=_tensor(cols.group_id, np.int64),
        run_ids=_tensor(cols.run_id, np.int64),
        policy_versions=_tensor(cols.policy_version, np.int64),
    )
    ends = np.cumsum(np.asarray(cols.meta_lens, dtype=np.int64)).tolist()
    raw = np.asarray(cols.meta_bytes, dtype=np.uint8).tobytes()
    starts = [0, *ends[:-1]]
    # one JSON array decoded at once: a call per row cost 1.5x as much
    pieces = [raw[a:e] for a, e in zip(starts, ends, strict=True)]
    rows = json.loads(b"[" + b",".join(pieces) + b"]")
    return tensors, _meta(rows, lambda m, k: m.get(k, {}))


def _ragged_positions(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and position within the row of every element of a flat ragged array."""
    rows = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    starts = np.cumsum(lens) - lens
    return rows, np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(starts, lens)


def _tensor(values: np.ndarray, dtype: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values, dtype=dtype))


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``cumsum(attention_mask, -1) - 1`` clipped at 0 (left padding gets position 0)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def pad_cols(t: torch.Tensor, left: int, right: int, value: float) -> torch.Tensor:
    """``t`` with ``left`` columns of ``value`` before and ``right`` after."""
    parts = []
    if left:
        parts.append(
            torch.full((t.shape[0], left, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
        )
    parts.append(t)
    if right:
        parts.append(
            torch.full((t.shape[0], right, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
        )
    return torch.cat(parts, dim=1)


def leading_all_zero(mask: torch.Tensor) -> int:
    """Number of leading columns of ``mask`` that are 0 in every row."""
    if mask.shape[0] == 0 or mask.shape[1] == 0:
        return 0
    any_real = (mask != 0).any(dim=0)
    nz = any_real.nonzero()
    return int(nz[0, 0]) if len(nz) else int(mask.shape[1])
