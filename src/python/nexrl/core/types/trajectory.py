"""One scored sample: what the rollout produced and the trainer consumes.

Token ids and log-probs come from the inference service itself (token in,
token out): a trajectory is never rebuilt by re-tokenizing text.

Serialisation (``to_record`` / ``from_record``) splits a trajectory into
fixed-width scalars, ragged numeric arrays and one JSON string, which is how
the trajectory pool stores it (flat arrays + offsets).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexrl.core.errors import NexrlError


class TrajectoryError(ValueError, NexrlError):
    """A trajectory (or a record of one) is malformed; the message names the field."""


# Ragged per-token arrays: name -> numpy dtype.
RAGGED_FIELDS: dict[str, str] = {
    "prompt_ids": "int32",
    "response_ids": "int32",
    "loss_mask": "int8",
    "logprobs": "float32",
}
# Fixed-width scalars: name -> numpy dtype.
SCALAR_FIELDS: dict[str, str] = {
    "reward": "float32",
    "group_id": "int64",
    "run_id": "int32",
    "policy_version": "int64",
    "policy_version_last": "int64",
}


@dataclass
class Trajectory:
    """A prompt, the sampled response and its score.

    Attributes:
        prompt_ids: prompt token ids as the inference service tokenized them.
        response_ids: sampled response token ids.
        loss_mask: 1 for response tokens trained on, 0 for masked ones (tool
            outputs, turns excluded by ``get_train_loss_mask``); same length as
            ``response_ids``.
        logprobs: behaviour log-probs of ``response_ids`` from the inference
            service (same length), used for off-policy correction.
        reward: scalar reward from the evaluator.
        group_id: id shared by the ``rollout_worker.group_size`` samples of one prompt
            (the GRPO group).
        run_id: 0..n-1 within the group; several trajectories may share a run
            id (one per LLM call of a multi-turn episode).
        policy_version: weight version that generated the response (its oldest
            token's: staleness is counted from it).
        policy_version_last: the newest version that may have produced one of its
            tokens (None: ``policy_version``). Greater than ``policy_version`` when
            the request straddled a weight update and the engine went on with the
            new weights (a partial rollout).
        metrics: float metrics from the evaluator/rollout.
        extra_info: any JSON-serialisable extra data.
        data_item: the original data row the prompt came from.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    reward: float
    group_id: int
    run_id: int = 0
    policy_version: int = 0
    policy_version_last: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra_info: dict[str, Any] = field(default_factory=dict)
    data_item: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy_version_last is None:
            self.policy_version_last = self.policy_version
        self.validate()

    def validate(self) -> None:
        """Raise ``TrajectoryError`` naming the first bad field."""
        n = len(self.response_ids)
        if n == 0:
            raise TrajectoryError("response_ids: empty response; a trajectory needs >= 1 token")
        if len(self.prompt_ids) == 0:
            raise TrajectoryError("prompt_ids: empty prompt")
        for name in ("loss_mask", "logprobs"):
            if len(getattr(self, name)) != n:
                raise TrajectoryError(
                    f"{name}: length {len(getattr(self, name))} != len(response_ids) {n}"
                )
        if self.policy_version_last is not None and self.policy_version_last < self.policy_version:
            raise TrajectoryError(
                f"policy_version_last: {self.policy_version_last} is older than "
                f"policy_version {self.policy_version}"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise TrajectoryError("loss_mask: values must be 0 or 1")
        if not math.isfinite(float(self.reward)):
            raise TrajectoryError(f"reward: must be a finite number, got {self.reward!r}")
        if any(not math.isfinite(lp) or lp > 1e-4 for lp in self.logprobs):
            raise TrajectoryError("logprobs: must be finite log-probabilities (<= 0)")
        if any(not isinstance(t, int | np.integer) or t < 0 for t in self.prompt_ids):
            raise TrajectoryError("prompt_ids: token ids must be non-negative integers")
        if any(not isinstance(t, int | np.integer) or t < 0 for t in self.response_ids):
            raise TrajectoryError("response_ids: token ids must be non-negative integers")
        for k, v in self.metrics.items():
            if not isinstance(v, int | float | np.number) or isinstance(v, bool):
                raise TrajectoryError(
                    f"metrics[{k!r}]: metrics must be floats, got {type(v).__name__}"
                )

    # -- pool format -------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        """Split into ``{"ragged": {...}, "scalars": {...}, "meta": str}``."""
        ragged = {k: np.asarray(getattr(self, k), dtype=dt) for k, dt in RAGGED_FIELDS.items()}
        scalars = {k: np.asarray(getattr(self, k), dtype=dt)[()] for k, dt in SCALAR_FIELDS.items()}
        meta = json.dumps(
            {
                "metrics": {k: float(v) for k, v in self.metrics.items()},
                "extra_info": self.extra_info,
                "data_item": self.data_item,
            },
            default=str,
        )
        return {"ragged": ragged, "scalars": scalars, "meta": meta}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Trajectory:
        """Inverse of ``to_record``."""
        try:
            ragged, scalars = record["ragged"], record["scalars"]
            meta = json.loads(record["meta"])
            return cls(
                prompt_ids=[int(x) for x in ragged["prompt_ids"]],
                response_ids=[int(x) for x in ragged["response_ids"]],
                loss_mask=[int(x) for x in ragged["loss_mask"]],
                logprobs=[float(x) for x in ragged["logprobs"]],
                reward=float(scalars["reward"]),
                group_id=int(scalars["group_id"]),
                run_id=int(scalars["run_id"]),
                policy_version=int(scalars["policy_version"]),
                policy_version_last=int(scalars["policy_version_last"]),
                metrics=meta.get("metrics", {}),
                extra_info=meta.get("extra_info", {}),
                data_item=meta.get("data_item", {}),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise TrajectoryError(f"malformed trajectory record: {exc!r}") from None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)
