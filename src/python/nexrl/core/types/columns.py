"""``Columns``: trajectories column-wise, the fields the pool stores and ``Batch`` pads.

Ragged per-token arrays are flat in trajectory order with per-trajectory
lengths; scalars are one array per field; the JSON meta of
``Trajectory.to_record`` is UTF-8 bytes + lengths. The pool's
``TrajectoryColumns`` adds the metric columns and the operations; the field
list and the dtypes are written here once (numpy only: no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nexrl.core.types.trajectory import RAGGED_FIELDS, SCALAR_FIELDS

__all__ = ["PROMPT_DTYPE", "RESPONSE_DTYPES", "SCALAR_DTYPES", "Columns"]

PROMPT_DTYPE = np.dtype(RAGGED_FIELDS["prompt_ids"])
# the per-token arrays that share the response lengths
RESPONSE_DTYPES: dict[str, np.dtype] = {
    k: np.dtype(v) for k, v in RAGGED_FIELDS.items() if k != "prompt_ids"
}
SCALAR_DTYPES: dict[str, np.dtype] = {k: np.dtype(v) for k, v in SCALAR_FIELDS.items()}


@dataclass
class Columns:
    """``n`` trajectories column-wise (flat arrays in trajectory order)."""

    prompt_ids: np.ndarray
    prompt_lens: np.ndarray
    response_ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    response_lens: np.ndarray
    reward: np.ndarray
    group_id: np.ndarray
    run_id: np.ndarray
    policy_version: np.ndarray
    policy_version_last: np.ndarray  # newest version that may have produced a token
    meta_bytes: np.ndarray
    meta_lens: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_lens)
