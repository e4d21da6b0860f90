"""vLLM's own weight-update API with nexrl's engine (``nexrl_shm``: its vLLM plugin,
``src/python/backends/inference/vllm_plugin``), against a REAL vLLM (the CPU build,
started by ``build-support/vllm.sh serve``) and a real weight channel under
``/dev/shm``, driven by nexrl's reload adapter as a run's sync drives it.

* Decode, sync, decode again: after each update vLLM's greedy answers to fixed
  prompts are those of the trainer's model (transformers, the same weights), its
  log-probs of them the same within 1e-3, and vLLM labels the weights with the
  version. Weights sent back restore the first answers exactly.
* A buffer that holds another version than the one asked for (the trainer moved on)
  and a tensor of another shape than the served model's are refused with the
  reason, the served weights and their label unchanged, the server healthy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from nexrl.core.weights.handoff.channel import WeightChannel
from nexrl.inference.reload import ReloadError
from tests.e2e._vllm import serve_vllm

PROMPTS = [[5, 9, 7, 11], [12, 6, 8], [4, 4, 10, 13, 7]]
ANSWER_TOKENS = 6


@pytest.fixture(scope="module")
def model_dir(tiny_model: Any) -> Path:
    # vLLM's CPU attention needs head_dim 64 (as recipes/max_digit/max_digit_vllm.yaml)
    return Path(tiny_model(seed=4, num_heads=1, num_kv_heads=1))


@pytest.fixture(scope="module")
def vllm_url(model_dir: Path) -> Iterator[str]:
    with serve_vllm(model_dir, "--max-model-len", "64") as url:
        yield url


def vllm_answers(url: str) -> list[tuple[list[int], list[float]]]:
    """Greedy token ids and their log-probs for each prompt."""
    out = []
    for prompt in PROMPTS:
        body = {
            "model": "policy",
            "prompt": prompt,
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0.0,
            "logprobs": 0,
            "ignore_eos": True,
            "return_tokens_as_token_ids": True,
        }
        choice = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]
        tokens = [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]
        out.append((tokens, [float(x) for x in choice["logprobs"]["token_logprobs"]]))
    return out


def trainer_answers(model: Any) -> list[tuple[list[int], list[float]]]:
    """The same from the transformers model (the trainer's forward), greedy."""
    out = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = list(prompt)
            logps = []
            for _ in range(ANSWER_TOKENS):
                logits = model(torch.tensor([ids])).logits[0, -1].float()
                lp = torch.log_softmax(logits, dim=-1)
                nxt = int(lp.argmax())
                ids.append(nxt)
                logps.append(float(lp[nxt]))
            out.append((ids[len(prompt) :], logps))
    return out


def assert_same(served: list[Any], reference: list[Any]) -> None:
    for (tokens, logps), (ref_tokens, ref_logps) in zip(served, reference, strict=True):
        assert tokens == ref_tokens
        assert max(abs(a - b) for a, b in zip(logps, ref_logps, strict=True)) < 1e-3


def test_decode_sync_decode_through_vllms_weight_update_api(model_dir: Path, vllm_url: str) -> None:
    from transformers import AutoModelForCausalLM

    from backends.inference.adapters import VLLMReloadAdapter

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    model.eval()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    adapter = VLLMReloadAdapter([vllm_url], timeout_s=120.0)
    channel = WeightChannel("shm", torch.device("cpu"))
    try:
        # the handshake: this vLLM has nexrl's engine, on this host
        assert adapter.channel_identity()[vllm_url]["host"] == os.uname().nodename
        before = vllm_answers(vllm_url)
        assert_same(before, trainer_answers(model))

        gen = torch.Generator().manual_seed(0)
        moved = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in initial.items()}
        model.load_state_dict(moved)
        adapter.reload_from_channel(channel.write(moved, 1), 1)
        after = vllm_answers(vllm_url)
        assert after != before  # the update changed what vLLM answers...
        assert_same(after, trainer_answers(model))  # ...to the trainer's answers
        assert adapter.served_version(vllm_url) == 1

        # refused: the buffer holds v1, the update asks for v2 (the trainer moved on)
        with pytest.raises(ReloadError, match="the buffer holds version 1, not 2"):
            adapter.reload_from_channel(channel.descriptor(), 2)
        assert adapter.served_version(vllm_url) == 1 and vllm_answers(vllm_url) == after

        # refused: a tensor of another shape, named in vLLM's answer
        other = WeightChannel("shm", torch.device("cpu"))
        try:
            bad = {k: (v[:3] if k == "model.embed_tokens.weight" else v) for k, v in moved.items()}
            with pytest.raises(ReloadError, match=r"model\.embed_tokens\.weight: \(3, 64\)"):
                adapter.reload_from_channel(other.write(bad, 2), 2)
        finally:
            other.close()
        assert httpx.get(f"{vllm_url}/health", timeout=10).status_code == 200
        assert adapter.served_version(vllm_url) == 1 and vllm_answers(vllm_url) == after

        # the first weights again: the first answers, exactly
        adapter.reload_from_channel(channel.write(initial, 3), 3)
        assert vllm_answers(vllm_url) == before
        assert adapter.served_version(vllm_url) == 3
    finally:
        channel.close()
        adapter.close()
