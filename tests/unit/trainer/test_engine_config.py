"""The DeepSpeed config built from TrainerConfig (a pure function: no DeepSpeed import)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from backends.trainer.deepspeed_engine import ds_config
from nexrl.core.config.sections.trainer import TrainerConfig


def test_zero_offload_bf16_and_batch_sizes() -> None:
    cfg = replace(
        TrainerConfig(), zero_stage=3, offload_optimizer=True, offload_param=True, bf16=True
    )
    c = ds_config(cfg, world_size=4, on_gpu=True)
    assert c["zero_optimization"]["stage"] == 3
    assert c["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert c["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert c["bf16"]["enabled"] is True
    assert c["train_batch_size"] == cfg.micro_batch_size * 4
    assert c["gradient_accumulation_steps"] == 1  # the trainer owns accumulation
    assert c["optimizer"]["type"] == "AdamW"  # DeepSpeed's CPU Adam for offload


def test_bf16_is_gpu_only_and_clipping_passes_through() -> None:
    c = ds_config(replace(TrainerConfig(), bf16=True, grad_clip=0.5), world_size=1, on_gpu=False)
    assert c["bf16"]["enabled"] is False
    assert c["gradient_clipping"] == 0.5
    assert "optimizer" not in c  # a client torch AdamW


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"zero_stage": 4}, "0-3"),
        ({"zero_stage": 0, "offload_optimizer": True}, "zero_stage >= 1"),
        ({"zero_stage": 2, "offload_param": True}, "zero_stage: 3"),
    ],
)
def test_bad_combinations_are_named(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ds_config(replace(TrainerConfig(), **changes), world_size=1, on_gpu=False)


def test_importing_nexrl_trainer_does_not_import_deepspeed() -> None:
    import os
    import subprocess

    code = "import sys, nexrl.trainer, nexrl.core.weights; print('deepspeed' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "False"


def test_unknown_backend_is_a_recipe_error() -> None:
    from nexrl.core.config.errors import RecipeError
    from nexrl.trainer.engine import load_backend

    with pytest.raises(RecipeError, match=r"trainer.backend 'megatron': cannot import"):
        load_backend("megatron")
    assert callable(load_backend("deepspeed"))
