"""A reported reward turns a recorded session into trajectories.

Each model call becomes a trajectory exactly as the inference service sampled
it (the rollout worker's ``trajectory``); ``trajectory_mode``:

* ``auto`` (default): one merged episode (``merge_episode``: the calls and the
  tokens between them — tool results, user turns, role markers — in one
  sequence, the in-between tokens masked out of the loss) when every call's
  prompt extends the previous call's prompt and reply token for token, else
  one trajectory per call;
* ``episode``: the merged episode, or a 422 saying why the calls do not chain;
* ``per_call``: one trajectory per call (every one with the session's reward).

GRPO groups by episode: every trajectory of a session has the session's
``group_id`` (the GRPO group, shared by the sessions that attempted the same
task) and one ``run_id`` (default: derived from the session id, so two
sessions of a group never share a run id and the estimator weights sessions,
not calls, equally).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nexrl.core.types import Trajectory
from nexrl.core.types.episode import (
    BaseEvaluationTarget,
    Episode,
    EvaluationRunResult,
    call_trajectory,
    merge_episode,
)
from nexrl.rollout.agent_service.errors import ServiceError
from nexrl.rollout.agent_service.sessions import Session

__all__ = ["RewardReport", "session_trajectories", "stable_id"]

RUN_ID_LIMIT = 2**31  # run_id is stored as int32


def stable_id(text: str, limit: int) -> int:
    """A deterministic id in ``[0, limit)`` for a string (same in every process)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % limit


def group_id_of(value: int | str) -> int:
    """A group id as the pool stores it (int64): ints as they are, strings hashed."""
    return value if isinstance(value, int) else stable_id(f"group:{value}", 2**63)


class RewardReport(BaseModel):
    """Body of ``POST /v1/sessions/{id}/reward``."""

    model_config = ConfigDict(extra="forbid")

    reward: float = Field(description="the session's reward (a finite number)")
    group_id: int | str = Field(
        description="GRPO group: sessions that attempted the same task share it (int or string)"
    )
    run_id: int | None = Field(default=None, ge=0, lt=RUN_ID_LIMIT)
    trajectory_mode: Literal["auto", "episode", "per_call"] = "auto"
    train_calls: list[bool] | None = Field(
        default=None, description="one flag per recorded model call: which calls are trained on"
    )
    metrics: dict[str, float] = Field(default_factory=dict)
    extra_info: dict[str, Any] = Field(default_factory=dict)
    data_item: dict[str, Any] = Field(default_factory=dict)
    ground_truth: str = ""

    @field_validator("reward", mode="before")
    @classmethod
    def _reward(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"must be a number, got {v!r}")
        if not math.isfinite(v):
            raise ValueError(f"must be a finite number, got {v!r}")
        return v

    @field_validator("group_id", mode="before")
    @classmethod
    def _group(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise ValueError(f"must be an integer or a string, got {v!r}")
        if isinstance(v, int) and not 0 <= v < 2**63:
            raise ValueError(f"an integer group_id must be in [0, 2**63), got {v}")
        if isinstance(v, str) and not v:
            raise ValueError("must not be empty")
        return v

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
                    raise ValueError(f"metrics[{k!r}] must be a finite number, got {x!r}")
        return v


def session_trajectories(session: Session, report: RewardReport) -> tuple[list[Trajectory], str]:
    """The trajectories of ``session`` scored with ``report``, and the mode used."""
    calls = session.ordered_calls()
    gens = [g for c in calls for g in c.generations]
    flags = report.train_calls if report.train_calls is not None else [True] * len(gens)
    if len(flags) != len(gens):
        raise ServiceError(
            422,
            f"train_calls: {len(flags)} flag(s) for the {len(gens)} model call(s) recorded in "
            f"session {session.id!r} (one flag per call, in call order)",
            param="train_calls",
        )
    run_id = report.run_id if report.run_id is not None else stable_id(session.id, RUN_ID_LIMIT)
    item = {
        "group_id": group_id_of(report.group_id),
        "run_id": run_id,
        "data_item": report.data_item,
    }
    extra = {**report.extra_info, "session": session.id}
    if isinstance(report.group_id, str):
        extra["group"] = report.group_id
    result = EvaluationRunResult(
        reward=report.reward,
        ground_truth=report.ground_truth,
        metrics=dict(report.metrics),
        extra_info=extra,
    )
    parts = [call_trajectory(g, item, result, train=f) for g, f in zip(gens, flags, strict=True)]
    if report.trajectory_mode == "per_call" or len(parts) == 1:
        return parts, "per_call" if len(parts) > 1 else "episode"
    episode = Episode(
        item=item,
        target=BaseEvaluationTarget(final_answer=gens[-1].text or ""),
        calls=gens,
        infos=[{"finish": gens[-1].finish_reason}],
    )
    try:
        return [merge_episode(parts, episode)], "episode"
    except ValueError as exc:
        if report.trajectory_mode == "episode":
            raise ServiceError(
                422,
                f"trajectory_mode 'episode': {exc}",
                param="trajectory_mode",
                code="calls_do_not_chain",
            ) from None
        return parts, "per_call"
