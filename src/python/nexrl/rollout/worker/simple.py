"""``SimpleRolloutWorker`` (``rollout_worker.type: simple``): one chat completion per sample.

The samples of a prompt group are asked for in one request (the OpenAI ``n``
parameter: ``n = group_size`` choices of the same prompt) when
``rollout_worker.one_request_per_group`` is on (the default): the server
tokenizes and schedules the prompt once and answers with one reply, instead of
``group_size`` requests. Measured on the default recipe: 128 one-token samples
in 16 requests take ~0.08 s against ~0.4 s for 128 requests (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nexrl.core.chat import Generation
from nexrl.rollout.worker.base import BaseRolloutWorker, Episode
from nexrl.rollout.worker.evaluator import BaseEvaluationTarget, Evaluator

if TYPE_CHECKING:
    from nexrl.rollout.worker.spec import RolloutSpec


class SimpleRolloutWorker(BaseRolloutWorker):
    #: Ask for a group's samples in one request with ``n`` (``rollout_worker.one_request_per_group``).
    group_requests: bool = True
    #: The server takes one seed per choice (``seeds``, the embedded server): a seeded
    #: group samples exactly what one request per item would. Else one ``seed``.
    choice_seeds: bool = True

    @classmethod
    def from_spec(
        cls, spec: RolloutSpec, client: Any, evaluator: Evaluator, recorder: Any = None
    ) -> BaseRolloutWorker:
        worker = super().from_spec(spec, client, evaluator, recorder)
        assert isinstance(worker, SimpleRolloutWorker)
        worker.group_requests = spec.group_requests
        worker.choice_seeds = not spec.versions_from_pool  # the embedded server's own
        return worker

    async def run_agent(self, item: dict[str, Any]) -> Episode:
        """Ask the model once; the answer is the final answer."""
        messages = self.format_task_query(item["data_item"])
        (gen,) = await self.client.chat(messages, n=1, **self.sampling, **self.request_seed(item))
        return self._episode(item, messages, gen)

    async def run_group(self, items: list[dict[str, Any]]) -> list[Episode]:
        """One request with ``n = len(items)`` when every item asks the same messages
        (a GRPO group) and ``run_agent`` is this class's; else one request per item.

        Seeded runs send every item's own seed (``seeds``, the embedded server's
        extension): the group samples exactly the tokens one request per item would.
        Engines without it (``choice_seeds`` off: vLLM, SGLang) get the first item's
        ``seed`` and draw each choice from their own stream of it; a rerun of the
        group samples the same tokens either way.
        """
        if (
            not self.group_requests
            or len(items) < 2
            or type(self).run_agent is not SimpleRolloutWorker.run_agent
        ):
            return await super().run_group(items)
        queries = [self.format_task_query(item["data_item"]) for item in items]
        first = json.dumps(queries[0], sort_keys=True, default=str)
        if any(json.dumps(q, sort_keys=True, default=str) != first for q in queries[1:]):
            return await super().run_group(items)
        seeding: dict[str, Any] = self.request_seed(items[0])
        if seeding and self.choice_seeds:
            seeding = {"seeds": [self.request_seed(item)["seed"] for item in items]}
        gens = await self.client.chat(queries[0], n=len(items), **self.sampling, **seeding)
        if len(gens) != len(items):
            raise ValueError(
                f"inference service answered {len(gens)} choices for n={len(items)}; "
                "set rollout_worker.one_request_per_group=false for an engine without 'n'"
            )
        gens = sorted(gens, key=lambda g: g.index)
        return [
            self._episode(item, messages, gen)
            for item, messages, gen in zip(items, queries, gens, strict=True)
        ]

    @staticmethod
    def _episode(item: dict[str, Any], messages: list[dict[str, Any]], gen: Generation) -> Episode:
        text = gen.text or ""
        reply = {"role": "assistant", "content": text}
        return Episode(
            item=item,
            target=BaseEvaluationTarget(final_answer=text, observation=[*messages, reply]),
            calls=[gen],
            infos=[{"prompt_messages": messages, "response_message": reply}],
        )
