"""An episode and how it becomes trajectories: the types a rollout worker, an
evaluator and the Agent Service share.

``Episode`` (the model calls of one rollout, unscored) -> the evaluator's
``EvaluationRunResult`` -> ``call_trajectory`` (one trajectory per model call,
exactly as the service sampled it) or ``merge_episode`` (the calls of an
episode in one sequence, the tokens between them masked out of the loss).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nexrl.core.types.trajectory import Trajectory

if TYPE_CHECKING:
    from nexrl.core.chat import Generation

__all__ = [
    "TRAJECTORY_METRICS",
    "BaseEvaluationTarget",
    "Episode",
    "EvaluationRunResult",
    "call_trajectory",
    "merge_episode",
]

# Metrics a trajectory records about itself (not the evaluator's).
TRAJECTORY_METRICS = ("response_length", "model_calls")


@dataclass
class BaseEvaluationTarget:
    """What the rollout produced.

    Attributes:
        final_answer: the model's final output text.
        observation: the trace (messages / tool calls) that led to it.
    """

    final_answer: str
    observation: list[dict[str, Any]] = field(default_factory=list)


def _is_number(value: Any) -> bool:
    """A real number the trajectory keeps as a metric (Python or numpy)."""
    return isinstance(value, numbers.Real)


@dataclass
class EvaluationRunResult:
    """An evaluator's verdict.

    Attributes:
        reward: the RL signal (a finite float).
        ground_truth: the reference answer, for logs.
        metrics: extra float metrics, averaged per step in the logs.
        extra_info: anything else (kept with the trajectory).
    """

    reward: float
    ground_truth: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    extra_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # any real number (an int, a numpy float from a scorer); a bool is a mistake as
        # often as not (a comparison meant as 0/1): wrapping it says so
        if isinstance(self.reward, bool) or not _is_number(self.reward):
            raise TypeError(
                f"EvaluationRunResult.reward must be a float, got {self.reward!r}"
                + (" (a bool: wrap it in float())" if isinstance(self.reward, bool) else "")
            )
        if not math.isfinite(self.reward):
            raise ValueError(f"EvaluationRunResult.reward must be finite, got {self.reward!r}")
        self.reward = float(self.reward)
        # Checked here, in evaluate(), so that a bad metric is an evaluator error (the
        # sample scored 0 and counted, the run stopped naming the evaluator and the row,
        # and --check's example answer catches it), not a failed group per rollout.
        if not isinstance(self.metrics, dict):
            raise TypeError(
                f"EvaluationRunResult.metrics must be a dict of floats, got {self.metrics!r}"
            )
        for key, value in self.metrics.items():
            if isinstance(value, bool) or not _is_number(value):
                raise TypeError(
                    f"EvaluationRunResult.metrics[{key!r}] must be a float, got {value!r}"
                    + (" (a bool: wrap it in float())" if isinstance(value, bool) else "")
                )


@dataclass
class Episode:
    """What one rollout produced before scoring (picklable: it travels between futures).

    Attributes:
        item: the data-loader item (group_id, run_id, data_item, ...).
        target: what the evaluator sees (final answer and trace).
        calls: the model calls of the episode, in order.
        infos: one dict per call for ``get_train_loss_mask``.
        trace: the episode's spans (``nexrl.core.types.trace``: each model and tool call);
            stored with each of its trajectories (``extra_info["trace"]``).
    """

    item: dict[str, Any]
    target: BaseEvaluationTarget
    calls: list[Generation] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)


def call_trajectory(
    gen: Generation,
    item: dict[str, Any],
    result: EvaluationRunResult,
    train: bool = True,
) -> Trajectory:
    """A trajectory from one model call, exactly as the service sampled it."""
    if gen.logprobs is None or len(gen.logprobs) != len(gen.token_ids):
        raise ValueError("the inference reply has no per-token log-probs for its tokens")
    return Trajectory(
        prompt_ids=list(gen.prompt_token_ids),
        response_ids=list(gen.token_ids),
        loss_mask=[int(train)] * len(gen.token_ids),
        logprobs=[min(0.0, lp) for lp in gen.logprobs],
        reward=result.reward,
        group_id=int(item["group_id"]),
        run_id=int(item["run_id"]),
        policy_version=int(gen.policy_version or 0),
        policy_version_last=(
            None if gen.policy_version_last is None else int(gen.policy_version_last)
        ),
        metrics={**result.metrics, "response_length": float(len(gen.token_ids))},
        extra_info={
            **result.extra_info,
            "finish_reason": gen.finish_reason,
            "ground_truth": result.ground_truth,
        },
        data_item=item.get("data_item", {}),
    )


def merge_episode(parts: list[Trajectory], episode: Episode) -> Trajectory:
    """One trajectory from the per-call trajectories of an episode: the calls and the
    tokens between them in one sequence, those tokens masked out of the loss (needs each
    call's prompt to extend the previous prompt + reply token for token)."""
    first = parts[0]
    response = list(first.response_ids)
    mask, logprobs = list(first.loss_mask), list(first.logprobs)
    seen = list(first.prompt_ids) + list(first.response_ids)
    for k, part in enumerate(parts[1:], start=2):
        prompt = list(part.prompt_ids)
        if prompt[: len(seen)] != seen:
            raise ValueError(
                f"agent_trajectory 'episode': the prompt of model call {k} does not extend "
                f"call {k - 1}'s prompt and reply token for token (the chat template renders "
                "earlier turns differently from what was sampled); use 'per_call'"
            )
        between = prompt[len(seen) :]
        response += between + list(part.response_ids)
        mask += [0] * len(between) + list(part.loss_mask)
        logprobs += [0.0] * len(between) + list(part.logprobs)
        seen = prompt + list(part.response_ids)
    metrics = dict(first.metrics)
    metrics["model_calls"] = float(len(parts))
    metrics["response_length"] = float(len(response))
    return Trajectory(
        prompt_ids=list(first.prompt_ids),
        response_ids=response,
        loss_mask=mask,
        logprobs=logprobs,
        reward=first.reward,
        group_id=first.group_id,
        run_id=first.run_id,
        policy_version=min(p.policy_version for p in parts),
        policy_version_last=max(int(p.policy_version_last or p.policy_version) for p in parts),
        metrics=metrics,
        extra_info={**first.extra_info, "finish": episode.infos[-1].get("finish")},
        data_item=first.data_item,
    )
