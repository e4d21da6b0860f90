"""Config-defined multi-turn tool-calling agents (``rollout_worker.type: agent``)."""

from nexrl.rollout.worker.agent.config import (
    AgentConfig,
    AgentConfigError,
    ToolSpec,
    load_agent_config,
)
from nexrl.rollout.worker.agent.worker import TRAJECTORY_MODES, AgentRolloutWorker, merge_episode

__all__ = [
    "TRAJECTORY_MODES",
    "AgentConfig",
    "AgentConfigError",
    "AgentRolloutWorker",
    "ToolSpec",
    "load_agent_config",
    "merge_episode",
]
