"""Greedy answers from the trainer's own weights: an SFT run's validation generates
the held-out conversations' last assistant turn with the policy being trained, with no
inference server (``SftRun``: ``val/exact_match``).

Every rank runs the same ``generate`` on every prompt, so the ranks stay in step when
ZeRO-3 gathers parameters in each forward (HF's ``synced_gpus``); every rank returns
the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["greedy_answers"]

BATCH = 64  # prompts per generate call


def greedy_answers(
    module: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    synced: bool,
    device: Any = "cpu",
) -> list[list[int]]:
    """The greedy continuation of each prompt (token ids), up to and including the
    first of ``stop_ids``, at most ``max_new_tokens``; prompts are left-padded with
    ``pad_id`` in batches of ``BATCH`` (HF's ``generate`` derives the positions from the
    attention mask). ``synced``: keep generating until every rank is done (ZeRO-3)."""
    import torch

    stops = {int(s) for s in stop_ids}
    was_training = bool(getattr(module, "training", False))
    module.eval()
    out: list[list[int]] = []
    try:
        with torch.no_grad():
            for k in range(0, len(prompts), BATCH):
                chunk = [list(p) for p in prompts[k : k + BATCH]]
                width = max(len(p) for p in chunk)
                ids = torch.full((len(chunk), width), int(pad_id), dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, p in enumerate(chunk):
                    ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                    mask[i, width - len(p) :] = 1
                gen = module.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    max_new_tokens=int(max_new_tokens),
                    do_sample=False,
                    eos_token_id=sorted(stops),
                    pad_token_id=int(pad_id),
                    synced_gpus=synced,
                )
                for row in gen[:, width:].tolist():
                    answer: list[int] = []
                    for t in row:
                        answer.append(int(t))
                        if int(t) in stops:
                            break
                    out.append(answer)
    finally:
        module.train(was_training)
    return out
