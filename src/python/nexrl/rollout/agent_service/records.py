"""Trajectories pushed by agents that build their own: validated before anything is written.

Body of ``POST /v1/trajectories``: ``{"trajectories": [record, ...]}``, each
record with the fields of ``nexrl.core.types.Trajectory``::

    {"prompt_ids": [int], "response_ids": [int], "loss_mask": [0|1],
     "logprobs": [float <= 0], "reward": float, "group_id": int | str,
     "run_id": int, "policy_version": int, "policy_version_last": int | null,
     "metrics": {str: float},
     "extra_info": {...}, "data_item": {...}}

Every record is checked (types, lengths, finite values, unknown fields); one
bad record rejects the whole request with every problem listed as
``trajectories[i].field: what is wrong (how to fix it)``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nexrl.core.types import Trajectory, TrajectoryError
from nexrl.rollout.agent_service.errors import ServiceError
from nexrl.rollout.agent_service.rewards import RUN_ID_LIMIT, group_id_of

__all__ = ["MAX_RECORDS", "TrajectoryRecord", "validate_records"]

MAX_RECORDS = 10_000


class TrajectoryRecord(BaseModel):
    """One pushed trajectory (see the module doc)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt_ids: list[int] = Field(min_length=1)
    response_ids: list[int] = Field(min_length=1)
    loss_mask: list[int]
    logprobs: list[float]
    reward: float
    group_id: int | str
    run_id: int = Field(default=0, ge=0, lt=RUN_ID_LIMIT)
    policy_version: int = Field(default=0, ge=0)
    policy_version_last: int | None = Field(default=None, ge=0)
    metrics: dict[str, float] = Field(default_factory=dict)
    extra_info: dict[str, Any] = Field(default_factory=dict)
    data_item: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> TrajectoryRecord:
        n = len(self.response_ids)
        for name in ("loss_mask", "logprobs"):
            got = len(getattr(self, name))
            if got != n:
                raise _FieldProblem(name, f"has {got} entries for {n} response_ids (one per token)")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise _FieldProblem("loss_mask", "values must be 0 (not trained) or 1 (trained)")
        if any(t < 0 for t in self.prompt_ids):
            raise _FieldProblem("prompt_ids", "token ids must be >= 0")
        if any(t < 0 for t in self.response_ids):
            raise _FieldProblem("response_ids", "token ids must be >= 0")
        bad = [i for i, lp in enumerate(self.logprobs) if not math.isfinite(lp) or lp > 1e-4]
        if bad:
            raise _FieldProblem(
                "logprobs",
                f"entry {bad[0]} ({self.logprobs[bad[0]]!r}) is not a finite log-probability "
                "<= 0 (send the inference service's log-probs of the sampled tokens)",
            )
        last = self.policy_version_last
        if last is not None and last < self.policy_version:
            raise _FieldProblem(
                "policy_version_last",
                f"{last} is older than policy_version {self.policy_version} (the newest "
                "version that produced a token; leave it out when one version did)",
            )
        if not math.isfinite(self.reward):
            raise _FieldProblem("reward", f"must be a finite number, got {self.reward!r}")
        for k, v in self.metrics.items():
            if not math.isfinite(v):
                raise _FieldProblem(f"metrics.{k}", f"must be a finite number, got {v!r}")
        if isinstance(self.group_id, str) and not self.group_id:
            raise _FieldProblem("group_id", "must not be empty")
        if isinstance(self.group_id, int) and not 0 <= self.group_id < 2**63:
            raise _FieldProblem("group_id", "an integer group_id must be in [0, 2**63)")
        return self

    def trajectory(self) -> Trajectory:
        extra = dict(self.extra_info)
        if isinstance(self.group_id, str):
            extra.setdefault("group", self.group_id)
        return Trajectory(
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            loss_mask=list(self.loss_mask),
            logprobs=list(self.logprobs),
            reward=self.reward,
            group_id=group_id_of(self.group_id),
            run_id=self.run_id,
            policy_version=self.policy_version,
            policy_version_last=self.policy_version_last,
            metrics=dict(self.metrics),
            extra_info=extra,
            data_item=dict(self.data_item),
        )


class _FieldProblem(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


# strict mode accepts ints for float fields (JSON has one number type), not bools/strings.
_HINTS = {
    "missing": "add it",
    "extra_forbidden": "remove it (unknown field; the fields are those of nexrl.core.types.Trajectory)",
    "int_type": "send an integer",
    "float_type": "send a number",
    "list_type": "send a list",
    "dict_type": "send an object",
    "too_short": "send at least one token",
}


def _problems(i: int, exc: ValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors(include_url=False):
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _FieldProblem):
            field, msg = ctx_err.field, ctx_err.problem
        else:
            loc = [str(p) for p in err.get("loc", ())]
            # a union (int | str) reports one error per branch: name the field once
            if loc and loc[-1] in ("int", "str") and loc[0] == "group_id":
                loc, msg = ["group_id"], "must be an integer or a non-empty string"
            else:
                hint = _HINTS.get(str(err.get("type")), "")
                msg = str(err.get("msg", "invalid")) + (f" ({hint})" if hint else "")
            field = ".".join(loc) or "(record)"
        problem = {"param": f"trajectories[{i}].{field}", "message": msg}
        if problem not in out:
            out.append(problem)
    return out


def validate_records(body: Any) -> list[Trajectory]:
    """The trajectories of a push request, or a 422 ``ServiceError`` listing every problem."""
    if not isinstance(body, dict) or set(body) != {"trajectories"}:
        raise ServiceError(
            422,
            'body must be {"trajectories": [record, ...]} (fields of nexrl.core.types.Trajectory)',
            param="trajectories",
        )
    raw = body["trajectories"]
    if not isinstance(raw, list) or not raw:
        raise ServiceError(422, "trajectories: must be a non-empty list", param="trajectories")
    if len(raw) > MAX_RECORDS:
        raise ServiceError(
            413,
            f"trajectories: {len(raw)} records in one request; send at most {MAX_RECORDS}",
            param="trajectories",
        )
    problems: list[dict[str, Any]] = []
    out: list[Trajectory] = []
    for i, rec in enumerate(raw):
        if not isinstance(rec, dict):
            problems.append({"param": f"trajectories[{i}]", "message": "must be an object"})
            continue
        try:
            out.append(TrajectoryRecord.model_validate(rec).trajectory())
        except ValidationError as exc:
            problems.extend(_problems(i, exc))
        except TrajectoryError as exc:  # the Trajectory's own checks (should agree)
            problems.append({"param": f"trajectories[{i}]", "message": str(exc)})
    if problems:
        first = problems[0]
        more = (
            f" (and {len(problems) - 1} more problem(s), see details)" if len(problems) > 1 else ""
        )
        raise ServiceError(
            422,
            f"{first['param']}: {first['message']}{more}; nothing was written",
            param=first["param"],
            code="invalid_trajectory",
            details=problems,
        )
    return out
