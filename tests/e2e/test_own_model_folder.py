"""End-to-end: a user's own Hugging Face model folder as ``model.path``, of another
architecture than the tiny Qwen2 the recipes build (Llama, GPT-2), trains through
the whole loop: the embedded server serves it and reloads every snapshot, the
DeepSpeed trainer updates it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows


def _save(arch: str, tokenizer_dir: Path, out: Path) -> Path:
    """A small random model of ``arch`` with the tiny model's tokenizer and chat
    template, saved as a user's folder would be (``save_pretrained``)."""
    import torch
    from transformers import (
        AutoTokenizer,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(0)
    model: Any
    if arch == "llama":
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok),
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                initializer_range=0.02,
            )
        )
    else:
        model = GPT2LMHeadModel(
            GPT2Config(
                vocab_size=len(tok),
                n_embd=64,
                n_layer=2,
                n_head=4,
                n_positions=256,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                initializer_range=0.02,
            )
        )
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_model_folder_of_another_architecture_trains(
    arch: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    folder = _save(arch, tiny_model_dir, tmp_path / arch)
    out = tmp_path / "run"
    recipe = load_recipe_checked(RECIPE, overrides(out, f"model.path={folder}", steps=3))
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (3, None)

    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        # the server reloaded every update: step k samples with step k-1's weights
        assert r["version/rollout_min"] == r["version/rollout_max"] == r["step"] - 1
        assert r["version/inference"] == r["version/trainer"] == r["step"]
        assert r["pool/batch_size"] == 32 and r["actor/grad_norm"] > 0
        # the server's log-probs are the trainer's: it serves the weights trained
        assert abs(r["rollout_corr/kl_k1"]) < 1e-4
        assert r["rollout_corr/ppl_ratio"] == pytest.approx(1.0, abs=1e-3)
    snap = latest_snapshot(out / "snapshots")
    assert snap is not None and snap[0] == 3
    assert json.loads((snap[1] / "config.json").read_text())["model_type"] == arch
