"""Rollout workers: one data item in, scored trajectories out.

Hooks a custom worker overrides (load one with
``rollout_worker.custom_worker: "path/to/file.py:ClassName"``):

* ``format_task_query(data_item) -> messages``: the chat messages sent to the
  model (default: the row's prompt as one user message, or the row's message
  list as is).
* ``get_train_loss_mask(trajectory_infos) -> list[bool]``: which LLM calls of an
  episode are trained on (default: all); only those become trajectories
  (``trained_calls``).
* ``run_agent(item) -> Episode``: the model calls of one episode, async
  (unscored); ``score(episode)`` runs the evaluator and builds the trajectories.
  The controller runs the two as separate Dask futures (rollout, then
  evaluator), so the dashboard shows where time goes.
* ``run_group(items) -> list[Episode]``: the episodes of a whole prompt group
  (default: ``run_agent`` for each item, concurrently).
* ``rollout(item) -> list[Trajectory]``: the whole episode, scored, async
  (default: ``score(await run_agent(item))``). A custom worker may override
  just this; it then runs inside the rollout future.

Token ids and log-probs come from the inference service's reply: never from
re-tokenizing text.

Seeded requests: with a ``seed`` every model call carries its own sampling seed,
mixed from (seed, group_id, run_id, call index) by ``request_seed``, so the
same recipe samples the same tokens whatever order or batch the server sees
the requests in (a retried rollout re-samples the same episode).
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import TYPE_CHECKING, Any

from nexrl.core.chat import InferenceClient
from nexrl.core.types import Trajectory
from nexrl.core.types.episode import (
    BaseEvaluationTarget,
    Episode,
    EvaluationRunResult,
    call_trajectory,
)
from nexrl.core.util.rows import row_text
from nexrl.rollout.worker.evaluator import Evaluator

if TYPE_CHECKING:
    from nexrl.rollout.worker.spec import RolloutSpec

log = logging.getLogger(__name__)


def missing_episode_method(cls: type[BaseRolloutWorker]) -> str | None:
    """Why ``cls`` cannot run an episode (it overrides neither ``run_agent`` nor
    ``rollout``), or None."""
    if cls.run_agent is BaseRolloutWorker.run_agent and cls.rollout is BaseRolloutWorker.rollout:
        return (
            f"{cls.__name__} implements neither run_agent (the model calls; scoring then "
            "runs in an evaluator future) nor rollout (the whole scored episode); "
            "override one of them"
        )
    for name in ("run_agent", "run_group", "rollout"):  # awaited by the rollout task
        method = getattr(cls, name)
        if method is not getattr(BaseRolloutWorker, name) and not inspect.iscoroutinefunction(
            method
        ):
            return f"{cls.__name__}.{name} must be `async def` (the rollout task awaits it)"
    return None


class BaseRolloutWorker:
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
        *,
        seed: int | None = None,
    ) -> None:
        problem = missing_episode_method(type(self))
        if problem:
            raise TypeError(problem)
        self.client = client
        self.evaluator = evaluator
        self.sampling = dict(sampling)
        self.prompt_key = prompt_key
        self.seed = seed

    # -- hooks ---------------------------------------------------------------
    def format_task_query(self, data_item: dict[str, Any]) -> list[dict[str, Any]]:
        prompt = data_item[self.prompt_key]
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        return [dict(m) for m in prompt]

    def get_train_loss_mask(self, trajectory_infos: list[dict[str, Any]]) -> list[bool]:
        return [True] * len(trajectory_infos)

    async def run_agent(self, item: dict[str, Any]) -> Episode:
        """The model calls of one episode for ``item``, unscored (override this)."""
        raise TypeError(missing_episode_method(type(self)) or "run_agent is not implemented")

    def score(self, episode: Episode) -> list[Trajectory]:
        """Evaluate the episode and turn each trained model call into a trajectory
        (``trained_calls``)."""
        return trained_calls(self.call_trajectories(episode))

    def call_trajectories(self, episode: Episode) -> list[Trajectory]:
        """Evaluate the episode: one trajectory per model call, with the episode's reward;
        a call ``get_train_loss_mask`` excludes has loss mask 0."""
        data_item = episode.item.get("data_item", {})
        result = self.evaluate(data_item, episode.target)
        infos = episode.infos or [{} for _ in episode.calls]
        mask = self.get_train_loss_mask(infos)
        if len(mask) != len(episode.calls):
            raise ValueError(
                f"{type(self).__name__}.get_train_loss_mask returned {len(mask)} flags for "
                f"{len(episode.calls)} model calls"
            )
        return [
            self.trajectory(gen, episode.item, result, train=bool(m))
            for gen, m in zip(episode.calls, mask, strict=True)
        ]

    async def run_group(self, items: list[dict[str, Any]]) -> list[Episode]:
        """The episodes of one rollout future's items (a prompt group), in order.

        Default: ``run_agent`` for every item, concurrently. A worker whose items
        can share model calls overrides this (``SimpleRolloutWorker`` asks for a
        whole group's samples in one request with the OpenAI ``n`` parameter).
        """
        import asyncio

        return list(await asyncio.gather(*(self.run_agent(i) for i in items)))

    async def rollout(self, item: dict[str, Any]) -> list[Trajectory]:
        """Run one episode for ``item`` (a data-loader item) and score it."""
        return self.score(await self.run_agent(item))

    # -- how a run builds the worker (``rollout_worker.type``) ----------------------
    @classmethod
    def from_spec(
        cls, spec: RolloutSpec, client: Any, evaluator: Evaluator, recorder: Any = None
    ) -> BaseRolloutWorker:
        """This class's worker for a run: ``cls(client, evaluator, sampling, prompt_key)``
        with the run's seed. A worker type that needs more of the recipe (an agent
        config, a recorder) overrides it."""
        worker = cls(client, evaluator, dict(spec.sampling), spec.prompt_key)
        worker.seed = spec.seed  # set after construction: custom __init__s need not forward it
        return worker

    @classmethod
    def needs_recorder(cls, spec: RolloutSpec) -> bool:
        """Whether ``from_spec`` wants the process's recording agent service."""
        return False

    @classmethod
    def rollout_limit_s(cls, spec: RolloutSpec) -> float:
        """Seconds one group's rollout may take. Each model call is bounded by
        timeout_s (retries included); the margin covers multi-call episodes queued
        behind each other on a busy service."""
        return spec.timeout_s * 4 + 30.0

    @classmethod
    def scores_separately(cls) -> bool:
        """Whether ``run_agent`` + ``score`` give the episode (False when only ``rollout``
        is overridden: the episode is then scored inside ``rollout``)."""
        return cls.rollout is BaseRolloutWorker.rollout

    # -- helpers -------------------------------------------------------------
    def request_seed(self, item: dict[str, Any], call_index: int = 0) -> dict[str, Any]:
        """``{"seed": s}`` for model call ``call_index`` of ``item``'s episode (splat it
        into the request), or ``{}`` when requests are not seeded.

        ``s = blake2b(f"{seed}/{group_id}/{run_id}/{call_index}")`` as a 63-bit
        integer: distinct for every sample of a group, stable across processes.
        """
        if self.seed is None:
            return {}
        key = f"{self.seed}/{item.get('group_id')}/{item.get('run_id')}/{call_index}"
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return {"seed": int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF}

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
            # one line on the terminal (once per distinct error), the traceback in the log
            log.warning(
                "evaluator %s failed on data row %s",
                type(self.evaluator).__name__,
                row_text(data_item),
                exc_info=exc,
            )
            return EvaluationRunResult(
                reward=0.0,
                metrics={"evaluator_error": 1.0},
                extra_info={"evaluator_error": f"{type(exc).__name__}: {exc}"},
            )
        result.metrics.setdefault("evaluator_error", 0.0)
        return result

    # A trajectory from one model call, exactly as the service sampled it.
    trajectory = staticmethod(call_trajectory)


def trained_calls(calls: list[Trajectory]) -> list[Trajectory]:
    """The trajectories an episode's model calls give the pool: the calls that train (loss
    mask not all 0). A call masked out of the loss is not one: it would count in its GRPO
    group's size and baseline, and a group of ``group_size`` trajectories would then fill
    with the episodes' first attempts. An episode none of whose calls trains keeps its
    last call (loss mask 0), so that every episode stands in its group once and its
    reward still counts in the group's baseline."""
    kept = [t for t in calls if any(t.loss_mask)]
    return kept or calls[-1:]
