"""Token data for the training-service tests, as a client sends it."""

from __future__ import annotations

import random
from typing import Any


def rows(
    vocab_size: int, *, groups: int, group_size: int = 4, seed: int = 0
) -> list[dict[str, Any]]:
    """Token data as a sampler + scorer would send it: random prompts/responses, rewards
    mixed within each group (so GRPO keeps every group), one masked token sometimes."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        for i in range(group_size):
            prompt = [rng.randrange(10, vocab_size) for _ in range(rng.randint(2, 6))]
            response = [rng.randrange(10, vocab_size) for _ in range(rng.randint(2, 7))]
            mask = [1] * len(response)
            if len(response) > 3 and rng.random() < 0.3:
                mask[1] = 0
            reward = float(i % 2) if i < 2 else float(rng.random() < 0.5)
            out.append(
                {
                    "prompt_ids": prompt,
                    "response_ids": response,
                    "loss_mask": mask,
                    "reward": reward,
                    "group_id": g,
                    "run_id": i,
                }
            )
    return out
