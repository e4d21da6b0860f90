"""Shared test data for the trainer tests: a tiny model folder and grouped batches."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.core.types.batch import Batch
from nexrl.core.types.trajectory import Trajectory
from nexrl.trainer.spec import TrainerSpec

# The trainer tests' model (``tiny_model(**TRAINER_MODEL)``, see tests/conftest.py).
TRAINER_MODEL: dict[str, Any] = {
    "seed": 0,
    "init_std": 0.05,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_size": 64,
}


def make_batch(
    vocab_size: int,
    *,
    groups: int = 4,
    group_size: int = 4,
    seed: int = 0,
    model_dir: Path | None = None,
    prompt_len: tuple[int, int] = (2, 6),
    response_len: tuple[int, int] = (2, 7),
) -> Batch:
    """Grouped trajectories with random lengths and 0/1 rewards (each group mixed).

    With ``model_dir`` the behaviour log-probs are the model's own (ratio 1 at start).
    """
    rng = random.Random(seed)
    trajs = []
    for g in range(groups):
        for i in range(group_size):
            prompt = [rng.randrange(10, vocab_size) for _ in range(rng.randint(*prompt_len))]
            response = [rng.randrange(10, vocab_size) for _ in range(rng.randint(*response_len))]
            mask = [1] * len(response)
            if len(response) > 3 and rng.random() < 0.3:
                mask[1] = 0  # a masked token inside the response
            trajs.append(
                Trajectory(
                    prompt_ids=prompt,
                    response_ids=response,
                    loss_mask=mask,
                    logprobs=[-1.0] * len(response),
                    reward=float(i % 2) if i < 2 else float(rng.random() < 0.5),
                    group_id=g,
                    run_id=i,
                )
            )
    batch = Batch.from_trajectories(trajs, pad_token_id=0)
    if model_dir is not None:
        batch = with_model_log_probs(batch, model_dir)
    return batch


@torch.no_grad()
def with_model_log_probs(batch: Batch, model_dir: Path) -> Batch:
    from transformers import AutoModelForCausalLM

    from nexrl.trainer.ops import model_inputs, response_log_probs, response_valid

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    logits = model(**model_inputs(batch)).logits
    lp, _ = response_log_probs(logits, batch.prompt_width, batch["responses"], entropy_grad=None)
    lp = torch.where(response_valid(batch), lp, 0.0)
    batch.tensors["old_log_probs"] = lp.clone()
    batch.tensors["behaviour_log_probs"] = lp.clone()
    return batch


def spec(model_dir: Path, **overrides: Any) -> TrainerSpec:
    """A small, fast spec: ZeRO-1, micro-batch 4, lr 1e-2, no clipping surprises."""
    trainer = overrides.pop("trainer", {})
    algorithm = overrides.pop("algorithm", {})
    t = replace(
        TrainerConfig(),
        **{
            "lr": 1e-2,
            "micro_batch_size": 4,
            "zero_stage": 1,
            "total_train_steps": 100,
            "grad_clip": 0.0,
            **trainer,
        },
    )
    a = replace(AlgorithmConfig(), **algorithm)
    return TrainerSpec(trainer=t, algorithm=a, model_path=str(model_dir), **overrides)
