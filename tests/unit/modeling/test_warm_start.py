"""Warm start of the tiny model on demonstration conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.inference.embedded.tools import parse_tool_calls
from nexrl.core.conversations import Demo, WarmStartError, encode_demo, load_demos
from nexrl.driver.modeling import build_tokenizer, save_tiny_model
from nexrl.driver.modeling.warm_start import warm_start_dir

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Add a and b.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]
WORDS = ["add", "calculator", *"0123456789"]


def tool_demo(a: int, b: int) -> dict[str, object]:
    call = {"name": "calculator", "arguments": json.dumps({"a": a, "b": b})}
    return {
        "messages": [
            {"role": "system", "content": "Add."},
            {"role": "user", "content": f"add {a} {b}"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
            {"role": "tool", "content": str(a + b)},
            {"role": "assistant", "content": str(a + b)},
        ],
        "tools": TOOLS,
    }


def test_loss_mask_covers_exactly_the_assistant_turns() -> None:
    tok: Any = build_tokenizer(WORDS)
    stop = [int(tok.convert_tokens_to_ids("<|im_end|>"))]
    row = tool_demo(12, 34)
    demo = Demo(row["messages"], TOOLS, "x")  # type: ignore[arg-type]
    ids, mask = encode_demo(tok, demo, stop)
    full = tok.apply_chat_template(row["messages"], tools=TOOLS, tokenize=True, return_dict=False)
    assert ids == list(full) and len(mask) == len(ids)
    learnt = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert learnt == (
        '<tool_call>{"name": "calculator", "arguments": {"a": 12, "b": 34}}</tool_call>'
        "<|im_end|>46<|im_end|>"
    )
    # the masked tokens are two contiguous spans, each ending at its <|im_end|>
    spans = [i for i in range(len(mask)) if mask[i] and (i == 0 or not mask[i - 1])]
    assert len(spans) == 2 and sum(mask) == len(tok(learnt)["input_ids"])


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", r"f\.jsonl:2: not valid JSON"),
        ('{"text": "hi"}', r"f\.jsonl:2: expected an object with a 'messages' list"),
        (
            '{"messages": [{"role": "bot", "content": "x"}]}',
            r"messages\[0\] needs a role.*not 'bot'",
        ),
        # an assistant turn with nothing in it (a misspelt key, an empty answer) taught the
        # model to answer nothing, and --check said the data was valid
        (
            '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "text": "4"}]}',
            r"messages\[1\] \(assistant\) has no 'content' and no 'tool_calls'",
        ),
        (
            '{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]}',
            r"messages\[1\] \(assistant\) has no 'content'",
        ),
        ('{"messages": [{"role": "user", "content": "x"}]}', "no assistant message"),
        ('{"messages": [{"role": "user", "content": 3}]}', r"messages\[0\]\.content"),
    ],
)
def test_bad_demonstrations_name_the_field_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write_jsonl(tmp_path / "f.jsonl", [tool_demo(1, 2)])
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(WarmStartError, match=f"model.tiny.warm_start.data_files: .*{message}"):
        load_demos([path], "model.tiny.warm_start.data_files")


def test_missing_and_empty_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(WarmStartError, match="not found"):
        load_demos([tmp_path / "nope.jsonl"])
    with pytest.raises(WarmStartError, match="hold no demonstrations"):
        load_demos([write_jsonl(tmp_path / "empty.jsonl", [])])


def greedy(model_dir: Path, messages: list[dict[str, object]]) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tok.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)
    return str(tok.decode(out[0, len(ids) :], skip_special_tokens=True))


def test_after_warm_start_the_model_writes_a_parseable_tool_call(tmp_path: Path) -> None:
    demos = write_jsonl(
        tmp_path / "demos.jsonl", [tool_demo(a, b) for a in range(4) for b in range(4)]
    )
    model = save_tiny_model(tmp_path / "m", vocab=WORDS, init_std=0.02)
    prompt = tool_demo(2, 3)["messages"][:2]  # type: ignore[index]
    _, before = parse_tool_calls(greedy(model, prompt))
    assert before == []  # a random model writes no tool call
    losses = warm_start_dir(model, [demos], steps=150, lr=1e-2, batch_size=8, progress=False)
    assert losses[-1] < losses[0] / 5
    _, calls = parse_tool_calls(greedy(model, prompt))
    assert [c["function"]["name"] for c in calls] == ["calculator"]
    assert set(json.loads(calls[0]["function"]["arguments"])) == {"a", "b"}


def test_shared_prefix_forward_equals_the_plain_forward(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from nexrl.driver.modeling.warm_start import shared_prefix_logits

    torch.manual_seed(0)
    model_dir = save_tiny_model(tmp_path / "m", vocab=WORDS)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prefix = torch.randint(10, 300, (1, 20))
    ids = torch.cat([prefix.expand(3, -1), torch.randint(10, 300, (3, 6))], dim=1)
    attn = torch.ones_like(ids)
    ids[2, -2:], attn[2, -2:] = 0, 0  # a shorter, right-padded row
    plain = model(input_ids=ids, attention_mask=attn).logits
    shared = shared_prefix_logits(model, ids, attn)
    keep = attn.bool()
    assert torch.allclose(plain[keep], shared[keep], atol=1e-5)


def test_prepare_model_warm_starts_once_and_a_stopped_warm_start_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from safetensors.torch import load_file

    from nexrl.driver.modeling.cache import CACHE_ENV
    from nexrl.driver.modeling.prepare import prepare_model

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))  # (an earlier build's is skipped)
    from nexrl.driver.recipe import load_recipe_checked

    demos = write_jsonl(tmp_path / "demos.jsonl", [tool_demo(12, 34), tool_demo(56, 78)])

    def cfg(out: Path, files: str) -> Any:
        recipe = "recipes/calculator/calculator_agent_tiny.yaml"
        over = [f"output_dir={out}", f"model.tiny.warm_start.data_files={files}"]
        return load_recipe_checked(recipe, [*over, "model.tiny.warm_start.steps=5"]).cfg

    warm, root = cfg(tmp_path / "run", f"[{demos}]"), tmp_path / "run"
    root.mkdir()
    with pytest.raises(KeyboardInterrupt):  # SIGTERM/Ctrl-C during the warm start
        prepare_model(warm, root, should_stop=lambda: True)
    assert list(root.iterdir()) == []  # no half-built model is left to be reused
    assert not (tmp_path / "cache" / "models").exists()  # nor cached
    model, _ = prepare_model(warm, root)
    stamp = (model / "model.safetensors").stat().st_mtime_ns
    assert prepare_model(warm, root)[0] == model  # built once
    assert (model / "model.safetensors").stat().st_mtime_ns == stamp
    cold, _ = prepare_model(cfg(tmp_path / "cold", "[]"), tmp_path / "cold")
    a, b = load_file(model / "model.safetensors"), load_file(cold / "model.safetensors")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
    again, _ = prepare_model(cfg(tmp_path / "again", f"[{demos}]"), tmp_path / "again")
    c = load_file(again / "model.safetensors")  # the warm-started one, from the cache
    assert all(torch.equal(a[k], c[k]) for k in a)
