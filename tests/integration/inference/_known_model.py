"""A tiny Qwen2 with hand-set weights: a bigram table, so greedy output is known.

Token embeddings are one-hot (hidden size >= vocabulary), attention and MLP
outputs are zeroed (``o_proj``/``down_proj`` = 0), so the last hidden state is
the current token's one-hot vector and ``lm_head`` is a lookup table: after
token ``a`` the model says ``next[a]`` with overwhelming probability.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import torch
from transformers import GenerationConfig

from nexrl.driver.modeling import build_tiny_model, build_tokenizer

LOGIT = 1.0  # times sqrt(hidden) after the final RMSNorm: logits ~21 vs 0


def save_bigram_model(out_dir: Path, after_prompt: str) -> Path:
    """Greedy decoding after a chat generation prompt emits ``after_prompt`` then ``<|im_end|>``.

    ``after_prompt`` must tokenize to tokens that do not repeat (a bigram
    table has one successor per token).
    """
    tok = build_tokenizer()
    newline = cast(int, tok.convert_tokens_to_ids("Ċ"))  # the generation prompt ends "assistant\n"
    im_end = cast(int, tok.convert_tokens_to_ids("<|im_end|>"))
    chain = [newline, *tok(after_prompt)["input_ids"], im_end]
    if len(set(chain)) != len(chain):
        raise ValueError(f"tokens of {after_prompt!r} repeat; a bigram table cannot say it")
    hidden = -(-len(tok) // 8) * 8
    model = build_tiny_model(
        len(tok),
        hidden_size=hidden,
        num_layers=1,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=8,
        pad_token_id=tok.pad_token_id,
        eos_token_ids=[tok.eos_token_id, im_end],
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.zero_()
        model.model.embed_tokens.weight[:, : len(tok)] = torch.eye(len(tok))
        for a, b in itertools.pairwise(chain):
            model.lm_head.weight[b, a] = LOGIT
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.eos_token_id, im_end], pad_token_id=tok.pad_token_id
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir
