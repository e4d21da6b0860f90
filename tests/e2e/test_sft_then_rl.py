"""End-to-end: SFT from a conversation dataset (recipes/max_digit_sft/sft_tiny.yaml,
``mode: sft``) on real DeepSpeed trainer actors, resumed from its checkpoint, then an
RL run (grpo_from_sft.yaml) that starts from the SFT run's newest snapshot (``model.path``
names the SFT run's folder) and records it as its parent (``parent.json``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import read_rows

SFT = "recipes/max_digit_sft/sft_tiny.yaml"
RL = "recipes/max_digit_sft/grpo_from_sft.yaml"
TEST = "recipes/max_digit/data/test.jsonl"


def greedy_accuracy(model_dir: Path) -> float:
    """Share of max_digit's held-out prompts whose greedy first answer token is right
    (what the RL run's validation at temperature 0 measures, here without a run)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = [json.loads(line) for line in Path(TEST).read_text().splitlines()]
    tok: Any = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hits = 0
    with torch.no_grad():
        for r in rows:
            messages = [{"role": "user", "content": r["prompt"]}]
            ids = tok.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            nxt = int(model(input_ids=torch.tensor([list(ids)])).logits[0, -1].argmax())
            hits += tok.decode([nxt]).strip() == r["answer"]
    return hits / len(rows)


def exact_by_hand(model_dir: Path, conversations: Path) -> float:
    """Share of held-out conversations whose last assistant turn the model in
    ``model_dir`` generates greedily and then stops (its end token), with HF's own
    ``generate`` on the snapshot read from disk: what ``val/exact_match`` must equal."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    rows = [json.loads(line) for line in conversations.read_text().splitlines()]
    hits = 0
    with torch.no_grad():
        for r in rows:
            *context, last = r["messages"]
            ids = tok.apply_chat_template(
                context, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            want = tok(last["content"], add_special_tokens=False)["input_ids"]
            out = model.generate(
                input_ids=torch.tensor([list(ids)]),
                max_new_tokens=len(want) + 1,
                do_sample=False,
                eos_token_id=sorted(stops),
                pad_token_id=tok.pad_token_id,
            )[0, len(ids) :].tolist()
            hits += out[: len(want)] == want and len(out) > len(want) and out[len(want)] in stops
    return hits / len(rows)


def weights(snapshot: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(snapshot.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_sft_from_data_then_rl_from_its_snapshot(tmp_path: Path) -> None:
    sft_out = tmp_path / "sft"
    common = [f"output_dir={sft_out}", "cluster.dashboard_address=127.0.0.1:0"]
    # 1. 30 SFT steps (checkpoint at 20 and 30), then resumed to 40 steps
    first = load_recipe_checked(SFT, [*common, "trainer.total_train_steps=30"])
    assert Controller(first, progress=False).run().steps == 30
    resumed = load_recipe_checked(SFT, [*common, "trainer.total_train_steps=40"])
    assert Controller(resumed, progress=False).run().steps == 40

    rows = read_rows(sft_out)
    steps = [r["step"] for r in rows if "actor/sft_loss" in r]
    assert steps == list(range(1, 41))  # the resumed run continued at step 31
    epochs = [r["sft/epoch"] for r in rows if "sft/epoch" in r]
    assert epochs == sorted(epochs) and epochs[-1] >= 5  # 40 x 32 of 210: data order continued
    val = {r["step"]: r["val/loss"] for r in rows if "val/loss" in r}
    assert sorted(val) == [0, 10, 20, 30, 40]
    assert val[40] < 0.5 * val[0], val  # validation loss on held-out conversations drops
    assert all(r["sft/padding_fraction"] < 0.5 for r in rows if "sft/rows" in r)  # packed

    snapshot = sft_out / "snapshots" / "latest"
    assert snapshot.resolve().name == "v40"  # the final weights are a snapshot
    # validation also generates: the share of held-out conversations answered exactly,
    # as HF's generate on the final snapshot answers them; the summary and plot say so
    exact = {r["step"]: r["val/exact_match"] for r in rows if "val/exact_match" in r}
    assert sorted(exact) == sorted(val) and exact[0] < exact[40], exact
    by_hand = exact_by_hand(snapshot, Path("recipes/max_digit_sft/data/val.jsonl"))
    assert exact[40] == pytest.approx(by_hand), (exact, by_hand)
    summary = json.loads((sft_out / "summary.json").read_text())
    assert summary["val_exact_last"] == exact[40] and summary["val_loss_last"] == val[40]
    assert summary["sft_loss_last5_mean"] < summary["sft_loss_first5_mean"]
    assert (sft_out / "plots" / "sft_curve.png").stat().st_size > 10_000
    scratch = greedy_accuracy(sft_out / "model")  # the random tiny model SFT started from
    tuned = greedy_accuracy(snapshot)

    # 2. RL from the SFT run (model.path names its run folder, as the recipe does: its
    # newest snapshot): one step at lr 0, so the weights it publishes (v1) are the
    # weights it started from
    rl_out = tmp_path / "rl"
    rl = load_recipe_checked(
        RL,
        [
            f"output_dir={rl_out}",
            f"model.path={sft_out}",
            "trainer.total_train_steps=1",
            "trainer.lr=0",
            "validate.every=0",
            "cluster.dashboard_address=127.0.0.1:0",
        ],
    )
    assert Controller(rl, progress=False).run().steps == 1
    start, sft_weights = weights(rl_out / "snapshots" / "v1"), weights(snapshot)
    assert start.keys() == sft_weights.keys()
    for k, v in sft_weights.items():
        assert torch.equal(start[k], v), k

    # the RL run records its parent: the SFT run, its snapshot v40 and that one's checksums
    parent = json.loads((rl_out / "parent.json").read_text())
    manifest = (snapshot / "checksums.json").read_bytes()
    assert parent["run"] == str(sft_out.resolve()) and parent["version"] == 40
    assert parent["experiment_name"] == "max_digit_sft"
    assert parent["snapshot"] == str(snapshot.resolve())
    assert parent["fingerprint"] == "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert json.loads((rl_out / "summary.json").read_text())["parent"] == parent
    started = f"model.path: starts from {sft_out.resolve()} (experiment max_digit_sft) snapshot v40"
    assert started in (rl_out / "logs" / "driver.log").read_text()

    rl_rows = read_rows(rl_out)
    val_start = next(r["val/reward/mean"] for r in rl_rows if r["step"] == 0)
    # the RL run's own validation (inference service + evaluator) at step 0 measures the
    # SFT weights; the random start answers (almost) nothing right
    assert val_start == pytest.approx(tuned, abs=0.05)
    # (measured: 0.80 after these 40 steps, 1.0 after the recipe's 60; the random start 0.0)
    assert val_start >= max(0.6, scratch + 0.5), (val_start, scratch, val)
