"""Rollout workers: one data item in, scored trajectories out.

Hooks a custom worker overrides (load one with
``rollout_worker.custom_rollout_worker_module_path`` + ``..._class_name``):

* ``format_task_query(data_item) -> messages``: the chat messages sent to the
  model (default: the row's prompt as one user message, or the row's message
  list as is).
* ``get_train_loss_mask(trajectory_infos) -> list[bool]``: which LLM calls of an
  episode are trained on (default: all).
* ``rollout(item) -> list[Trajectory]``: the whole episode, async.

Token ids and log-probs come from the inference service's reply: never from
re-tokenizing text.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from nexrl.inference import Generation, InferenceClient
from nexrl.rollout_worker.evaluator import BaseEvaluationTarget, EvaluationRunResult, Evaluator
from nexrl.types import Trajectory

log = logging.getLogger(__name__)


class BaseRolloutWorker(ABC):
    """Shared plumbing: the inference client, the evaluator and sampling settings.

    ``sampling`` holds OpenAI parameters sent with every call (temperature,
    top_p, max_tokens); ``prompt_key`` names the data column with the prompt.
    """

    def __init__(
        self,
        client: InferenceClient,
        evaluator: Evaluator,
        sampling: dict[str, Any],
        prompt_key: str = "prompt",
    ) -> None:
        self.client = client
        self.evaluator = evaluator
        self.sampling = dict(sampling)
        self.prompt_key = prompt_key

    # -- hooks ---------------------------------------------------------------
    def format_task_query(self, data_item: dict[str, Any]) -> list[dict[str, Any]]:
        prompt = data_item[self.prompt_key]
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        return [dict(m) for m in prompt]

    def get_train_loss_mask(self, trajectory_infos: list[dict[str, Any]]) -> list[bool]:
        return [True] * len(trajectory_infos)

    @abstractmethod
    async def rollout(self, item: dict[str, Any]) -> list[Trajectory]:
        """Run one episode for ``item`` (a data-loader item) and score it."""

    # -- helpers -------------------------------------------------------------
    def evaluate(
        self, data_item: dict[str, Any], target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        """Run the evaluator; one that raises gives reward 0 and an error metric."""
        try:
            result = self.evaluator.evaluate(data_item, target)
            if not isinstance(result, EvaluationRunResult):
                raise TypeError(
                    f"{type(self.evaluator).__name__}.evaluate returned "
                    f"{type(result).__name__}, not EvaluationRunResult"
                )
        except Exception as exc:  # user code: never crash the run
            log.warning(
                "evaluator %s failed: %s: %s",
                type(self.evaluator).__name__,
                type(exc).__name__,
                exc,
            )
            return EvaluationRunResult(
                reward=0.0,
                metrics={"evaluator_error": 1.0},
                extra_info={"evaluator_error": f"{type(exc).__name__}: {exc}"},
            )
        result.metrics.setdefault("evaluator_error", 0.0)
        return result

    @staticmethod
    def trajectory(
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
            metrics={**result.metrics, "response_length": float(len(gen.token_ids))},
            extra_info={
                **result.extra_info,
                "finish_reason": gen.finish_reason,
                "ground_truth": result.ground_truth,
            },
            data_item=item.get("data_item", {}),
        )
