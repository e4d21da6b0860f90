"""Agent Service: train an existing agent with zero code changes.

An OpenAI-compatible proxy in front of the inference service. An unmodified
agent uses it as its ``base_url`` with a session id as its API key (or the
``X-NexRL-Session`` header); every model call is recorded as the service
sampled it (token ids, log-probs, policy version). Reporting the session's
reward (``POST /v1/sessions/{id}/reward``) turns the calls into trajectories
in the pool, in one commit. Agents that build their own trajectories push
them with ``POST /v1/trajectories`` (``push_trajectories``).

Importing this package is cheap: the app, server and CLI modules (FastAPI,
uvicorn) are imported by name when used.
"""

from nexrl.rollout.agent_service.client import AgentServiceError, push_trajectories, report_reward
from nexrl.rollout.agent_service.config import ServiceConfig
from nexrl.rollout.agent_service.sessions import SessionLimits

__all__ = [
    "AgentServiceError",
    "ServiceConfig",
    "SessionLimits",
    "push_trajectories",
    "report_reward",
]
