"""``SimpleRolloutWorker`` (``rollout_worker.type: simple``): one chat completion per sample."""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker.base import BaseRolloutWorker, Episode
from nexrl.rollout_worker.evaluator import BaseEvaluationTarget


class SimpleRolloutWorker(BaseRolloutWorker):
    async def run_agent(self, item: dict[str, Any]) -> Episode:
        """Ask the model once; the answer is the final answer."""
        messages = self.format_task_query(item["data_item"])
        (gen,) = await self.client.chat(messages, n=1, **self.sampling, **self.request_seed(item))
        text = gen.text or ""
        reply = {"role": "assistant", "content": text}
        return Episode(
            item=item,
            target=BaseEvaluationTarget(final_answer=text, observation=[*messages, reply]),
            calls=[gen],
            infos=[{"prompt_messages": messages, "response_message": reply}],
        )
