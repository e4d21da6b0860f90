"""Unmodified OpenAI-API agents trained by ``nexrl train`` (``rollout_worker.type: openai_agent``).

The recipe names a plain function (``rollout_worker.agent_entrypoint:
"path/to/agent.py:run"``) written only against the ``openai`` client::

    def run(task: dict, *, base_url: str, api_key: str, model: str) -> str: ...
    async def run(task: dict, *, base_url: str, api_key: str, model: str) -> str: ...

Each episode calls it with the data row and the address of an in-process agent
service; its model calls are recorded there and become the episode's
trajectories. Importing this package is cheap (the service is started, and
FastAPI/uvicorn imported, only by ``Recorder``).
"""

from nexrl.rollout.worker.openai_agent.entrypoint import (
    ENTRYPOINT_FIELD,
    AgentEntrypoint,
    AgentError,
    load_entrypoint,
)
from nexrl.rollout.worker.openai_agent.worker import OpenAIAgentWorker

__all__ = [
    "ENTRYPOINT_FIELD",
    "AgentEntrypoint",
    "AgentError",
    "OpenAIAgentWorker",
    "load_entrypoint",
]
