"""``Batch``: the padded tensors a trainer step consumes, plus per-row metadata.

Layout (the verl convention the trainers expect)::

    input_ids      [B, P+R]  = prompts (left-padded) ++ responses (right-padded)
    attention_mask [B, P+R]  1 on every real token (prompt or response), 0 on padding
    position_ids   [B, P+R]  cumsum(attention_mask) - 1, clipped at 0
    prompts        [B, P]    left-padded prompt ids
    responses      [B, R]    right-padded response ids
    response_mask  [B, R]    trajectory loss mask x valid (0 on padding and masked tokens)
    old_log_probs, behaviour_log_probs [B, R]  behaviour log-probs, 0 on padding
    rewards [B] float32; group_ids, run_ids, policy_versions [B] int64

Every tensor has the same first dimension ``B``. Two-dimensional tensors are
"sequence" tensors and are padded/cropped with their side of the layout: the
full-sequence ones (width ``P+R``) are split at ``P``, prompt-side ones (width
``P``) are padded on the left, response-side ones (width ``R``) on the right.
A tensor a trainer adds (``advantages``, ``ref_log_probs``, ...) is classified
by its width; when ``P == R`` an unknown key counts as response-side.

``meta`` holds non-tensor data: a ``list`` value is per-row (its length must be
``B``; it is indexed and concatenated with the rows), any other value (scalars,
tuples, dicts) is batch-global and carried unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nexrl.core.errors import NexrlError
from nexrl.core.types.columns import Columns
from nexrl.core.types.padded import (
    FULL_KEYS,
    ID_KEYS,
    PROMPT_KEYS,
    RESPONSE_KEYS,
    leading_all_zero,
    pad_cols,
    padded_from_columns,
    padded_from_trajectories,
    position_ids_from_mask,
)
from nexrl.core.types.trajectory import Trajectory

__all__ = ["Batch", "BatchError"]

Index = int | slice | Sequence[int] | torch.Tensor


class BatchError(ValueError, NexrlError):
    """A batch is inconsistent or misused; the message names the tensor or meta key."""


@dataclass
class Batch:
    """Tensors sharing their first dimension, plus ``meta`` (see module doc)."""

    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        sizes = {k: int(t.shape[0]) for k, t in self.tensors.items() if t.dim() > 0}
        for k, t in self.tensors.items():
            if t.dim() == 0:
                raise BatchError(f"tensor {k!r} is 0-d; put batch-global scalars in meta")
        n = len(self)
        for k, s in sizes.items():
            if s != n:
                raise BatchError(f"tensor {k!r} has first dimension {s}, expected {n}: {sizes}")
        for k, v in self.meta.items():
            if isinstance(v, list) and len(v) != n:
                raise BatchError(
                    f"meta[{k!r}] is a per-row list of length {len(v)}, expected {n}; "
                    "wrap batch-global lists in a tuple"
                )

    # -- construction ------------------------------------------------------
    @classmethod
    def from_trajectories(cls, trajs: Sequence[Trajectory], pad_token_id: int = 0) -> Batch:
        """Pad ``trajs`` into the layout described in the module doc."""
        if len(trajs) == 0:
            raise BatchError("from_trajectories: no trajectories to batch")
        return cls(*padded_from_trajectories(trajs, pad_token_id), pad_token_id)

    @classmethod
    def from_columns(cls, cols: Columns, pad_token_id: int = 0) -> Batch:
        """The pool's columns padded straight into the layout: the same batch as
        ``from_trajectories(cols.to_trajectories())``, without a ``Trajectory`` per row."""
        if len(cols) == 0:
            raise BatchError("from_columns: no trajectories to batch")
        return cls(*padded_from_columns(cols, pad_token_id), pad_token_id)

    # -- access --------------------------------------------------------------
    def __len__(self) -> int:
        for t in self.tensors.values():
            return int(t.shape[0])
        for v in self.meta.values():
            if isinstance(v, list):
                return len(v)
        return 0

    def keys(self) -> Iterator[str]:
        return iter(self.tensors)

    def __contains__(self, key: object) -> bool:
        return key in self.tensors

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if value.dim() == 0 or (self.tensors and value.shape[0] != len(self)):
            raise BatchError(
                f"tensor {key!r}: first dimension must be the batch size {len(self)}, "
                f"got shape {tuple(value.shape)}"
            )
        self.tensors[key] = value

    def __getitem__(self, index: str | Index) -> Any:
        """``batch["key"]`` -> tensor; an int, slice, index list/tensor or bool mask -> Batch.

        An int gives a one-row Batch (the batch dimension is kept).
        """
        if isinstance(index, str):
            if index not in self.tensors:
                raise KeyError(f"no tensor {index!r} in batch; have {sorted(self.tensors)}")
            return self.tensors[index]
        if isinstance(index, int):
            n = len(self)
            if not -n <= index < n:
                raise IndexError(f"row {index} out of range for a batch of {n}")
            index = slice(index % n, index % n + 1)
        idx: slice | torch.Tensor
        if isinstance(index, slice):
            rows = list(range(len(self)))[index]
            idx = index
        else:
            t = torch.as_tensor(index)
            if t.dtype == torch.bool:
                t = t.nonzero().flatten()
            rows = [int(i) for i in t.tolist()]
            idx = t.to(torch.int64)
        tensors = {
            k: v[idx.to(v.device) if isinstance(idx, torch.Tensor) else idx]
            for k, v in self.tensors.items()
        }
        meta = {k: [v[i] for i in rows] if isinstance(v, list) else v for k, v in self.meta.items()}
        return Batch(tensors, meta, self.pad_token_id)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A new Batch with every tensor on ``device`` (meta is shared)."""
        tensors = {k: v.to(device, non_blocking=non_blocking) for k, v in self.tensors.items()}
        return Batch(tensors, dict(self.meta), self.pad_token_id)

    # -- layout ---------------------------------------------------------------
    @property
    def prompt_width(self) -> int:
        """``P``: the width of ``prompts``."""
        return int(self._require("prompts").shape[1])

    @property
    def response_width(self) -> int:
        """``R``: the width of ``responses``."""
        return int(self._require("responses").shape[1])

    def _require(self, key: str) -> torch.Tensor:
        if key not in self.tensors:
            raise BatchError(f"this operation needs tensor {key!r}; have {sorted(self.tensors)}")
        return self.tensors[key]

    def _side(self, key: str) -> str:
        """``"full"``, ``"prompt"``, ``"response"`` or ``"row"`` (not a sequence tensor)."""
        t = self.tensors[key]
        if t.dim() < 2:
            return "row"
        for side, keys in (
            ("full", FULL_KEYS),
            ("prompt", PROMPT_KEYS),
            ("response", RESPONSE_KEYS),
        ):
            if key in keys:
                return side
        p, r, w = self.prompt_width, self.response_width, int(t.shape[1])
        if w == r:
            return "response"
        if w == p:
            return "prompt"
        if w == p + r:
            return "full"
        raise BatchError(
            f"tensor {key!r} has width {w}; sequence tensors must be as wide as the prompt "
            f"({p}), the response ({r}) or both ({p + r})"
        )

    def _pad_value(self, key: str) -> float:
        return float(self.pad_token_id) if key in ID_KEYS else 0.0

    def pad_to(self, prompt_width: int, response_width: int) -> Batch:
        """Pad (never crop) to the given widths: prompt side on the left, response side on the right.

        ``position_ids`` is recomputed from the padded ``attention_mask``.
        """
        p, r = self.prompt_width, self.response_width
        dp, dr = prompt_width - p, response_width - r
        if dp < 0 or dr < 0:
            raise BatchError(
                f"pad_to({prompt_width}, {response_width}) is narrower than ({p}, {r})"
            )
        if dp == 0 and dr == 0:
            return Batch(dict(self.tensors), dict(self.meta), self.pad_token_id)
        out: dict[str, torch.Tensor] = {}
        for k, t in self.tensors.items():
            side, v = self._side(k), self._pad_value(k)
            if side == "row":
                out[k] = t
                continue
            left = dp if side in ("full", "prompt") else 0
            right = dr if side in ("full", "response") else 0
            out[k] = pad_cols(t, left, right, v)
        if "position_ids" in out and "attention_mask" in out:
            out["position_ids"] = position_ids_from_mask(out["attention_mask"]).to(
                out["position_ids"].dtype
            )
        return Batch(out, dict(self.meta), self.pad_token_id)

    def _crop(self, left: int, right: int) -> Batch:
        p, r = self.prompt_width, self.response_width
        out: dict[str, torch.Tensor] = {}
        for k, t in self.tensors.items():
            side = self._side(k)
            if side == "row":
                out[k] = t
            elif side == "prompt":
                out[k] = t[:, left:]
            elif side == "response":
                out[k] = t[:, : r - right]
            else:
                out[k] = t[:, left : p + r - right]
        return Batch(out, dict(self.meta), self.pad_token_id)

    def remove_redundant_left_padding(self) -> Batch:
        """Drop leading prompt columns that are padding (attention 0) in every row."""
        mask = self._require("attention_mask")[:, : self.prompt_width]
        return self._crop(leading_all_zero(mask), 0)

    def remove_redundant_right_padding(self) -> Batch:
        """Drop trailing response columns that are padding (attention 0) in every row."""
        mask = self._require("attention_mask")[:, self.prompt_width :]
        return self._crop(0, leading_all_zero(mask.flip(1)))

    def pad_to_multiple(self, n: int) -> Batch:
        """Right-pad the response side so the sequence length ``P+R`` is a multiple of ``n``."""
        if n < 1:
            raise BatchError(f"pad_to_multiple: n must be >= 1, got {n}")
        p, r = self.prompt_width, self.response_width
        return self.pad_to(p, r + (-(p + r)) % n)

    def pad_rows_to_multiple(self, n: int) -> tuple[Batch, int]:
        """Append copies of the first rows so ``len`` is a multiple of ``n`` (e.g. the DP size).

        The copies get ``response_mask`` 0 so they never contribute to a loss.
        Returns ``(padded, n_added)``; ``padded[: len(padded) - n_added]`` undoes it.
        """
        if n < 1:
            raise BatchError(f"pad_rows_to_multiple: n must be >= 1, got {n}")
        if len(self) == 0:
            raise BatchError("pad_rows_to_multiple: cannot pad an empty batch")
        extra = (-len(self)) % n
        if extra == 0:
            return self, 0
        copies = self[torch.arange(extra) % len(self)]
        if "response_mask" in copies:
            copies.tensors["response_mask"] = torch.zeros_like(copies.tensors["response_mask"])
        return Batch.concat([self, copies]), extra

    # -- combining ------------------------------------------------------------
    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Stack rows; batches of different widths are first padded to the widest."""
        if len(batches) == 0:
            raise BatchError("concat: no batches given")
        first = batches[0]
        for i, b in enumerate(batches[1:], start=1):
            if set(b.tensors) != set(first.tensors):
                diff = sorted(set(b.tensors) ^ set(first.tensors))
                raise BatchError(f"concat: batch {i} has different tensors; differing keys {diff}")
            if b.pad_token_id != first.pad_token_id:
                raise BatchError(
                    f"concat: batch {i} has pad_token_id {b.pad_token_id}, "
                    f"batch 0 has {first.pad_token_id}"
                )
            _check_meta_compatible(first.meta, b.meta, i)
        if "prompts" in first.tensors and "responses" in first.tensors:
            pw = max(b.prompt_width for b in batches)
            rw = max(b.response_width for b in batches)
            batches = [b.pad_to(pw, rw) for b in batches]
        tensors = {}
        for k in first.tensors:
            try:
                tensors[k] = torch.cat([b.tensors[k] for b in batches], dim=0)
            except RuntimeError as exc:
                raise BatchError(f"concat: tensor {k!r} cannot be stacked: {exc}") from None
        meta = {
            k: [x for b in batches for x in b.meta[k]] if isinstance(v, list) else v
            for k, v in first.meta.items()
        }
        return Batch(tensors, meta, first.pad_token_id)


def _check_meta_compatible(a: dict[str, Any], b: dict[str, Any], i: int) -> None:
    if set(a) != set(b):
        raise BatchError(
            f"concat: batch {i} has different meta keys; differing {sorted(set(a) ^ set(b))}"
        )
    for k, v in a.items():
        if isinstance(v, list) != isinstance(b[k], list):
            raise BatchError(f"concat: meta[{k!r}] is per-row in one batch and global in another")
        if not isinstance(v, list) and b[k] != v:
            raise BatchError(
                f"concat: batch-global meta[{k!r}] differs: {v!r} (batch 0) vs {b[k]!r} (batch {i})"
            )
