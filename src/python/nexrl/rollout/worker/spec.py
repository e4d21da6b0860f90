"""``RolloutSpec``: everything a rollout or evaluator future needs (small, picklable)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nexrl.core.pool.config import PoolConfig

__all__ = ["RolloutSpec"]


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a rollout or evaluator future needs (small and picklable).

    Attributes:
        worker_type: ``rollout_worker.type``: a registered rollout-worker type ('simple',
            'agent', 'openai_agent', a plugin's) or 'path/to/file.py:ClassName'.
        custom_worker: ``(file, class)`` of a custom rollout worker, or None.
        evaluator: ``(file, class)`` of the recipe's evaluator, or
            ``("nexrl.rollout.evaluators", name)`` for a named one.
        evaluator_options: a named evaluator's options, as JSON.
        roots: folders relative recipe paths are searched in (absolute).
        base_urls: the inference service's replicas.
        served_model_name / api_key: sent with every request.
        timeout_s / max_retries: per inference request (openai client).
        sampling: OpenAI sampling parameters (temperature, top_p, max_tokens).
        prompt_key: data column holding the prompt.
        pool: the trajectory pool config (store resolved).
        group_requests: one request with ``n`` per prompt group
            (``rollout_worker.one_request_per_group``; the 'simple' worker).
        batch_requests: chat calls made at the same moment go in one batch request
            (``rollout_worker.batch_requests``; the embedded server only).
        versions_from_pool: the engines do not report policy versions (``base_urls``
            replicas: vLLM, SGLang): tag each reply with the version the controller
            last loaded everywhere, read from the pool's weight-sync record when the
            request starts, and the newest it may serve, read when the reply arrives
            (``InferenceClient``'s ``version_source`` and ``version_ceiling``).
    """

    worker_type: str
    evaluator: tuple[str, str]
    roots: tuple[str, ...]
    base_urls: tuple[str, ...]
    served_model_name: str
    sampling: tuple[tuple[str, Any], ...]
    pool: PoolConfig
    custom_worker: tuple[str, str] | None = None
    api_key: str = "EMPTY"
    timeout_s: float = 60.0
    max_retries: int = 2
    prompt_key: str = "prompt"
    agent_config: str | None = None  # absolute path, for worker_type 'agent'
    agent_trajectory: str = "per_call"
    agent_entrypoint: str | None = None  # 'file.py:function', for worker_type 'openai_agent'
    agent_timeout_s: float = 300.0
    seed: int | None = None  # per-request sampling seeds (BaseRolloutWorker.request_seed)
    versions_from_pool: bool = False
    group_requests: bool = True
    batch_requests: bool = False
    evaluator_options: str = "{}"

    def with_sampling(self, **overrides: Any) -> RolloutSpec:
        return replace(self, sampling=tuple({**dict(self.sampling), **overrides}.items()))

    def with_base_urls(self, urls: list[str]) -> RolloutSpec:
        return replace(self, base_urls=tuple(urls))
