"""LoRA (``trainer.lora``) on real DeepSpeed and a real embedded server: only the
adapters train, snapshots hold only the adapter, and the server's reloaded
policy gives the trainer's log-probs."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.trainer import create_trainer
from nexrl.trainer.base import SelfHostedTrainer
from tests.integration.inference._helpers import SERVED_NAME
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")

LORA: dict[str, Any] = {
    "rank": 4,
    "alpha": 8.0,
    "target_modules": ["q_proj", "v_proj"],
    "dropout": 0.0,
}
PROMPT = [40, 41, 42, 43, 44]


def _lora_trainer(model_dir: Path, snaps: Path, **lora: Any) -> SelfHostedTrainer:
    from dataclasses import replace

    from nexrl.core.config.sections.trainer import LoraConfig

    s = spec(model_dir, snapshot_dir=str(snaps), keep_snapshots=2)
    s.trainer = replace(s.trainer, lora=LoraConfig(**{**LORA, **lora}))
    return create_trainer(s)


def _trainer_log_probs(trainer: SelfHostedTrainer, tokens: list[int]) -> torch.Tensor:
    """log pi(token_t | tokens_<t) for the tokens after PROMPT, by the trainer's model."""
    trainer.engine.train(False)
    with torch.no_grad():
        ids = torch.tensor([tokens])
        logits = trainer.engine.forward(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    lp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
    target = ids[0, 1:]
    return lp.gather(-1, target[:, None])[:, 0][len(PROMPT) - 1 :]


def _server_generation(server: EmbeddedServer) -> tuple[list[int], list[float]]:
    async def run() -> tuple[list[int], list[float]]:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c:
            (g,) = await c.complete(PROMPT, max_tokens=8, temperature=0, ignore_eos=True)
            assert g.logprobs is not None
            return g.token_ids, g.logprobs

    return asyncio.run(run())


def _reload(server: EmbeddedServer, path: Path, version: int) -> None:
    r = httpx.post(
        f"{server.base_url}/update_weights_from_disk",
        json={"model_path": str(path), "version": version},
        timeout=120,
    )
    assert r.status_code == 200, r.text


def test_lora_trains_adapters_only_and_the_server_serves_the_adapted_policy(
    tiny_model_dir: Path,
    vocab_size: int,
    tmp_path: Path,
    start_embedded_server: Callable[..., EmbeddedServer],
) -> None:
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    base_weights = {k: v.clone() for k, v in base.state_dict().items()}
    trainer = _lora_trainer(tiny_model_dir, tmp_path / "snaps")
    before = {k: v.detach().clone() for k, v in trainer.engine.module.named_parameters()}
    trainable = {k for k, v in trainer.engine.module.named_parameters() if v.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    # 2 layers x (q_proj, v_proj) x (A, B)
    assert len(trainable) == 8

    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    metrics = trainer.train_step(batch)
    assert metrics["weight/published_version"] == 1.0
    after = dict(trainer.engine.module.named_parameters())
    for name, old in before.items():
        if name in trainable:
            continue
        assert torch.equal(after[name].detach(), old), f"base weight {name} changed"
    changed = [n for n in trainable if not torch.equal(after[n].detach(), before[n])]
    # B starts at 0, so the first step's gradient of A (B^T dL/dh x^T) is 0: only B moves
    assert sorted(changed) == sorted(n for n in trainable if "lora_B" in n)

    version, snap = latest_snapshot(tmp_path / "snaps") or (None, None)
    assert version == 1 and snap is not None
    files = {p.name for p in snap.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "version"} <= files
    assert not any(f.startswith("model") for f in files) and "config.json" not in files
    adapter_cfg = json.loads((snap / "adapter_config.json").read_text())
    assert adapter_cfg["r"] == 4 and adapter_cfg["lora_alpha"] == 8.0
    assert adapter_cfg["base_model_name_or_path"] == str(tiny_model_dir)

    server = start_embedded_server(tiny_model_dir)
    base_tokens, base_lps = _server_generation(server)
    for v in (1, 2):
        if v == 2:  # a second adapter is merged into the base, not into version 1's policy
            trainer.train_step(batch)
            snap = tmp_path / "snaps" / "v2"
        _reload(server, snap, v)
        tokens, lps = _server_generation(server)
        expected = _trainer_log_probs(trainer, [*PROMPT, *tokens])
        assert torch.allclose(torch.tensor(lps), expected, atol=1e-4), (lps, expected)
    assert lps != base_lps or tokens != base_tokens

    # the base model on disk is untouched, and the trainer's frozen base equals it
    peft_model: Any = trainer.engine.module
    module_state = peft_model.get_base_model().state_dict()
    for k, v in base_weights.items():
        key = k.replace("q_proj.", "q_proj.base_layer.").replace("v_proj.", "v_proj.base_layer.")
        assert torch.equal(module_state[key], v), k


def test_a_full_lm_head_beside_the_adapters_is_saved_and_served(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """``modules_to_save: [lm_head]``: the head trains in full, goes into the
    snapshot, and the server's merge (PEFT's path) gives the trainer's log-probs."""
    from backends.inference.embedded.weights import load_adapter_snapshot, load_snapshot

    trainer = _lora_trainer(tiny_model_dir, tmp_path / "snaps", modules_to_save=["lm_head"])
    trainable = [k for k, v in trainer.engine.module.named_parameters() if v.requires_grad]
    assert any("lm_head.modules_to_save" in k for k in trainable)
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    trainer.train_step(batch)
    base = load_snapshot(tiny_model_dir, device=torch.device("cpu"), dtype=torch.float32)
    model = load_adapter_snapshot(tmp_path / "snaps" / "v1", base=base, device=torch.device("cpu"))
    tokens = [*PROMPT, 50, 51, 52]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0, :-1], -1)
    got = lp.gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0][len(PROMPT) - 1 :]
    assert torch.allclose(got, _trainer_log_probs(trainer, tokens), atol=1e-5)
    with torch.no_grad():
        base_lp = torch.log_softmax(base(input_ids=torch.tensor([tokens])).logits[0, :-1], -1)
    assert not torch.allclose(lp, base_lp, atol=1e-3)  # the base copy was not merged into


def test_a_server_started_on_an_adapter_snapshot_merges_it_into_its_base(
    tiny_model_dir: Path,
    vocab_size: int,
    tmp_path: Path,
) -> None:
    from backends.inference.embedded.weights import load_model_dir

    trainer = _lora_trainer(tiny_model_dir, tmp_path / "snaps")
    batch = make_batch(vocab_size, groups=2, group_size=4, model_dir=tiny_model_dir)
    trainer.train_step(batch)
    model, base = load_model_dir(
        tmp_path / "snaps" / "v1", device=torch.device("cpu"), dtype=torch.float32
    )
    tokens = [*PROMPT, 50, 51, 52]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0, :-1], -1)
    got = lp.gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0][len(PROMPT) - 1 :]
    assert torch.allclose(got, _trainer_log_probs(trainer, tokens), atol=1e-5)
    assert base is not model

    # the trainer guide's PEFT example loads the same policy
    blocks = re.findall(r"```python\n(.*?)```", Path("docs/trainer.md").read_text(), re.S)
    (block,) = [b for b in blocks if "PeftModel" in b]
    scope: dict[str, Any] = {"model_path": str(tiny_model_dir), "snapshot_dir": tmp_path / "snaps"}
    exec(block, scope)
    with torch.no_grad():
        logits = scope["policy"](input_ids=torch.tensor([tokens])).logits[0, :-1]
    lp = torch.log_softmax(logits, -1)
    got = lp.gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0][len(PROMPT) - 1 :]
    assert torch.allclose(got, _trainer_log_probs(trainer, tokens), atol=1e-5)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "target_modules",
            [],
            "trainer.lora.target_modules: empty; name the modules that get adapters",
        ),
        ("dropout", 1.0, "trainer.lora.dropout: must be in [0, 1), got 1.0"),
    ],
)
def test_a_bad_lora_setting_is_refused_before_anything_starts(
    field: str, value: object, message: str
) -> None:
    from omegaconf import OmegaConf

    from nexrl.trainer.checks import lora

    cfg = OmegaConf.create({"trainer": {"lora": {**LORA, field: value}}})
    assert lora(cfg, []) == [message]


@pytest.mark.parametrize(
    ("service", "lora_extra", "message"),
    [
        (
            {"backend": "sglang"},
            {},
            "trainer.lora: LoRA snapshots are served by the embedded server and vLLM, not "
            "service.inference_service.backend 'sglang' (its reload loads full weights)",
        ),
        (
            {"backend": "vllm", "command": "vllm serve {model} --port {port}"},
            {},
            "service.inference_service.command: a LoRA run loads its adapters into vLLM at "
            "run time; add --enable-lora --max-lora-rank 8 to the command",
        ),
        (
            {"backend": "vllm", "base_urls": ["http://gpu1:8000/v1"]},
            {"modules_to_save": ["lm_head"]},
            "trainer.lora.modules_to_save: vLLM loads adapters without modules trained in "
            "full (it refuses them: 'vLLM only supports modules_to_save being None'); "
            "remove it, or serve with the embedded server",
        ),
    ],
)
def test_lora_on_an_engine_that_cannot_serve_it_is_refused(
    service: dict[str, Any], lora_extra: dict[str, Any], message: str
) -> None:
    from omegaconf import OmegaConf

    from nexrl.trainer.checks import lora

    cfg = OmegaConf.create(
        {
            "trainer": {"lora": {**LORA, **lora_extra}},
            "service": {"inference_service": service},
        }
    )
    assert lora(cfg, []) == [message]
    ok = {"backend": "vllm", "command": "vllm serve {model} --enable-lora --max-lora-rank 8"}
    fine = OmegaConf.create({"trainer": {"lora": LORA}, "service": {"inference_service": ok}})
    assert lora(fine, []) == []


def test_a_lora_run_resumed_from_a_checkpoint_continues_as_if_uninterrupted(
    tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """3 steps straight == 1 step, checkpoint, a new LoRA trainer resuming, 2 more."""
    from dataclasses import replace

    from nexrl.core.config.sections.trainer import LoraConfig

    batches = [make_batch(vocab_size, groups=2, group_size=4, seed=i) for i in range(3)]

    def trainer(**overrides: Any) -> SelfHostedTrainer:
        s = spec(tiny_model_dir, trainer={"total_train_steps": 3, "save_every": 1}, **overrides)
        s.trainer = replace(s.trainer, lora=LoraConfig(**LORA))
        return create_trainer(s)

    straight = trainer()
    expected = [straight.train_step(b) for b in batches]
    first = trainer(checkpoint_dir=str(tmp_path / "ck"))
    first.train_step(batches[0])
    first.close()
    resumed = trainer(checkpoint_dir=str(tmp_path / "ck"), resume_mode="auto")
    assert resumed.policy_version == 1
    got = [resumed.train_step(b) for b in batches[1:]]
    for e, g in zip(expected[1:], got, strict=True):
        assert g["actor/grad_norm"] == pytest.approx(e["actor/grad_norm"], rel=1e-4)
    wa, wb = straight.full_state_dict(), resumed.full_state_dict()
    assert wa is not None and wb is not None
    for k, v in wa.items():
        assert torch.allclose(v, wb[k], atol=1e-6), k
