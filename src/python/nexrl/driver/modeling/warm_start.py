"""Warm start: supervised fine-tuning of a model on demonstration conversations.

The analogue, for the tiny model, of starting RL from an instruct model: a
few hundred steps of plain cross-entropy teach it a format (e.g. Hermes
``<tool_call>{json}</tool_call>`` calls) that RL alone would have to discover
token by token. The demonstrations are JSON lines of conversations
(``nexrl.core.conversations``); the loss covers the tokens of the assistant
turns only, never the system, user or tool text.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nexrl.core.conversations import encode_demo, load_demos

if TYPE_CHECKING:  # heavy imports stay lazy: importing nexrl stays cheap
    import torch
    from transformers import PreTrainedModel

__all__ = ["shared_prefix_logits", "warm_start", "warm_start_dir"]


def _batch(
    rows: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (row_ids, row_mask) in enumerate(rows):
        ids[r, : len(row_ids)] = torch.tensor(row_ids)
        mask[r, : len(row_mask)] = torch.tensor(row_mask, dtype=torch.float32)
        attn[r, : len(row_ids)] = 1
    return ids, mask, attn


def shared_prefix_logits(
    model: PreTrainedModel, ids: torch.Tensor, attn: torch.Tensor, min_prefix: int = 16
) -> torch.Tensor:
    """``model(ids, attention_mask=attn).logits``, computing the prefix that every row
    shares (the system prompt and tools of demonstrations) once instead of per row.

    Right padding only. The same logits as the plain forward (a test checks it) at a
    fraction of the cost when the shared prefix is most of each row.
    """
    import torch

    same = (ids == ids[:1]).all(dim=0) & attn.bool().all(dim=0)
    prefix = int(same.long().cumprod(dim=0).sum())
    prefix = min(prefix, int(attn.sum(dim=1).min()) - 1)  # every row keeps a suffix
    if ids.shape[0] == 1 or prefix < min_prefix:
        return model(input_ids=ids, attention_mask=attn).logits
    head = model(input_ids=ids[:1, :prefix], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(ids.shape[0])
    tail = model(input_ids=ids[:, prefix:], attention_mask=attn, past_key_values=cache)
    return torch.cat([head.logits.expand(ids.shape[0], -1, -1), tail.logits], dim=1)


def warm_start(
    model: PreTrainedModel,
    encoded: list[tuple[list[int], list[int]]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    pad_id: int = 0,
    progress: bool | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[float]:
    """Train ``model`` in place on ``encoded`` (ids, loss mask) rows; the loss per step.

    Adam, cosine-decayed ``lr``, mean cross-entropy over the masked tokens,
    batches drawn with a ``seed``-ed generator (same inputs -> same weights). On
    CPU it uses half the cores, as a trainer rank does (``cpu_threads``).
    ``should_stop`` is asked before every step; True raises ``KeyboardInterrupt``
    (a stop asked for by SIGTERM/Ctrl-C is not delayed by the warm start).
    """
    import torch

    from nexrl.core.util.cpu import cpu_threads

    threads = torch.get_num_threads()
    torch.set_num_threads(cpu_threads(1))  # more threads than free cores: 10-20x slower
    try:
        return _train(model, encoded, steps, lr, batch_size, seed, pad_id, progress, should_stop)
    finally:
        torch.set_num_threads(threads)


def _train(
    model: PreTrainedModel,
    encoded: list[tuple[list[int], list[int]]],
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    pad_id: int,
    progress: bool | None,
    should_stop: Callable[[], bool] | None,
) -> list[float]:
    import torch
    from tqdm import tqdm

    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    model.train()
    losses: list[float] = []
    bar = tqdm(
        range(steps),
        desc="warm start",
        disable=None if progress is None else not progress,
        leave=False,
    )
    for _ in bar:
        if should_stop is not None and should_stop():
            raise KeyboardInterrupt("stopped during the warm start")
        ids, mask, attn = _batch(rng.sample(encoded, min(batch_size, len(encoded))), pad_id)
        logits = shared_prefix_logits(model, ids, attn)[:, :-1]
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        target = mask[:, 1:].reshape(-1)
        loss = (ce * target).sum() / target.sum().clamp(min=1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


def warm_start_dir(
    model_dir: str | Path,
    files: Sequence[str | Path],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    progress: bool | None = None,
    field: str = "data_files",
    should_stop: Callable[[], bool] | None = None,
) -> list[float]:
    """Warm-start the model saved in ``model_dir`` (tokenizer alongside) on the
    demonstrations of ``files`` and save it back; the loss per step."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    demos = load_demos(files, field)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    stops = model.generation_config.eos_token_id
    stop_ids = [int(s) for s in (stops if isinstance(stops, list) else [stops]) if s is not None]
    encoded = [encode_demo(tok, d, stop_ids or [int(tok.eos_token_id)]) for d in demos]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    losses = warm_start(
        model,
        encoded,
        steps=steps,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        pad_id=int(pad or 0),
        progress=progress,
        should_stop=should_stop,
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    return losses
