"""Settings of the agent service (the CLI flags, one field each)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nexrl.rollout.agent_service.sessions import SessionLimits

__all__ = ["ServiceConfig"]


@dataclass(frozen=True)
class ServiceConfig:
    """``upstream``: the inference service's base URL(s) (comma-separated or a list);
    ``pool``: the trajectory pool (a folder or fsspec URL); ``model``: if set, every
    request's ``model`` is replaced by it (agents that hard-code a model name).

    ``pool=None``: the service only records; reward reports and pushes are refused
    (``nexrl train``'s ``openai_agent`` worker takes the recorded calls itself).
    ``request_seed(session, call_seq)``: the sampling seed for a call that carries
    none (None: leave it unseeded); in-process use only.

    ``token``: the service's bearer token (None: none; then it must bind loopback):
    every request must carry it (see ``nexrl.rollout.agent_service.app``).
    ``upstream_api_key``: the bearer token of the inference service (its
    ``service.inference_service.api_key``), sent with every forwarded call."""

    upstream: str | list[str]
    pool: str | None
    model: str | None = None
    upstream_timeout_s: float = 300.0
    upstream_max_retries: int = 2
    fsync: bool = False
    limits: SessionLimits = field(default_factory=SessionLimits)
    request_seed: Callable[[str, int], int | None] | None = None
    token: str | None = None
    upstream_api_key: str | None = None
