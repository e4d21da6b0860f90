"""The service's request bodies (pydantic) and how token data becomes a ``Batch``.

A datum is one trajectory's tokens, the fields of ``nexrl.core.types.Trajectory``::

    {"prompt_ids": [...], "response_ids": [...],
     "loss_mask": [...],          # optional: all 1
     "logprobs": [...],           # optional: the sampler's log-probs of response_ids
     "reward": 1.0, "group_id": 0, "run_id": 0,   # for GRPO advantages (optional)
     "advantage": 0.5}            # optional: the sequence's advantage, given by the caller

Either every datum has ``advantage`` or none does (then a policy loss computes
advantages with the recipe's estimator from ``reward`` and ``group_id``).
Mistakes raise ``TrainingServiceError`` naming the field, e.g.
``data[2].loss_mask: length 3 != len(response_ids) 4``.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, Field

from nexrl.core.types.batch import Batch
from nexrl.trainer.service.core import TrainingServiceError

__all__ = [
    "Datum",
    "ForwardBackwardRequest",
    "LoadStateRequest",
    "SaveStateRequest",
    "TrainStepRequest",
    "batch_from_data",
]


class Datum(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int] | None = None
    logprobs: list[float] | None = None
    reward: float = 0.0
    group_id: int = 0
    run_id: int = 0
    advantage: float | None = None


class ForwardBackwardRequest(BaseModel):
    loss: str = Field(description="A loss name: cross_entropy or a POLICY_LOSSES name.")
    data: list[Datum]
    weight: float = Field(1.0, description="Multiplies this call's loss (and gradient).")


class TrainStepRequest(BaseModel):
    batch: dict[str, Any] | None = Field(
        None,
        description="The step's trajectories by their place in the pool (BatchRef.to_json).",
    )
    batch_path: str | None = Field(
        None, description="Or a batch file written by nexrl.trainer.save_batch."
    )


class SaveStateRequest(BaseModel):
    extra_state: dict[str, Any] | None = None


class LoadStateRequest(BaseModel):
    path: str


def batch_from_data(data: list[Datum], vocab_size: int | None = None) -> Batch:
    """The padded ``Batch`` of ``data`` (module doc); errors name ``data[i].field``."""
    from nexrl.core.types.trajectory import Trajectory, TrajectoryError

    if not data:
        raise TrainingServiceError("data: empty; send at least one datum", field="data")
    trajs = []
    for i, d in enumerate(data):
        n = len(d.response_ids)
        if vocab_size is not None:
            for name in ("prompt_ids", "response_ids"):
                bad = [t for t in getattr(d, name) if t >= vocab_size]
                if bad:
                    raise TrainingServiceError(
                        f"data[{i}].{name}: token id {bad[0]} is outside the model's vocabulary "
                        f"(size {vocab_size})",
                        field=f"data[{i}].{name}",
                    )
        try:
            trajs.append(
                Trajectory(
                    prompt_ids=d.prompt_ids,
                    response_ids=d.response_ids,
                    loss_mask=d.loss_mask if d.loss_mask is not None else [1] * n,
                    logprobs=d.logprobs if d.logprobs is not None else [0.0] * n,
                    reward=d.reward,
                    group_id=d.group_id,
                    run_id=d.run_id,
                )
            )
        except TrajectoryError as exc:
            raise TrainingServiceError(f"data[{i}].{exc}", field=f"data[{i}]") from None
    given = [d.advantage is not None for d in data]
    if any(given) and not all(given):
        i = given.index(False)
        raise TrainingServiceError(
            f"data[{i}].advantage: missing while other data have one; give every datum an "
            "advantage or none",
            field=f"data[{i}].advantage",
        )
    batch = Batch.from_trajectories(trajs, pad_token_id=0)
    if any(d.logprobs is None for d in data):  # no sampler log-probs: the trainer's own
        for key in ("old_log_probs", "behaviour_log_probs"):
            batch.tensors.pop(key, None)
    if all(given):
        adv = torch.tensor([float(d.advantage or 0.0) for d in data], dtype=torch.float32)
        batch["advantages"] = adv[:, None] * batch["response_mask"].float()
    return batch
