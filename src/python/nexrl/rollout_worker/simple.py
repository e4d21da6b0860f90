"""``SimpleRolloutWorker`` (``rollout_worker.type: simple``): one chat completion per sample."""

from __future__ import annotations

from typing import Any

from nexrl.rollout_worker.base import BaseRolloutWorker
from nexrl.rollout_worker.evaluator import BaseEvaluationTarget
from nexrl.types import Trajectory


class SimpleRolloutWorker(BaseRolloutWorker):
    async def rollout(self, item: dict[str, Any]) -> list[Trajectory]:
        """Ask the model once; score its answer; one trajectory."""
        data_item = item["data_item"]
        messages = self.format_task_query(data_item)
        (gen,) = await self.client.chat(messages, n=1, **self.sampling)
        text = gen.text or ""
        target = BaseEvaluationTarget(
            final_answer=text,
            observation=[*messages, {"role": "assistant", "content": text}],
        )
        result = self.evaluate(data_item, target)
        info = {"prompt_messages": messages, "response_message": target.observation[-1]}
        (train,) = self.get_train_loss_mask([info])
        return [self.trajectory(gen, item, result, train=train)]
