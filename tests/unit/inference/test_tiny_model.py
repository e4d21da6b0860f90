"""The tiny Qwen2 model and tokenizer built from config (no downloads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from backends.inference.embedded.tools import parse_tool_calls
from nexrl.driver.modeling import DEFAULT_WORDS, build_tiny_model, build_tokenizer, save_tiny_model


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


def test_text_round_trips_and_words_are_single_tokens(tokenizer: Any) -> None:
    text = "What is the largest of 3 7 5? Answer: <answer>7</answer> café ✓\n"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    pieces = [tokenizer.decode([i]) for i in ids]
    assert pieces[:5] == ["What", " is", " the", " largest", " of"]
    assert {"3", "7", "5"} <= set(pieces)  # digits are single tokens
    assert "answer" in pieces


def test_vocabulary_is_configurable_and_deterministic() -> None:
    custom = build_tokenizer(["zebra", "quokka"])
    assert custom.decode(custom(" zebra")["input_ids"]) == " zebra"
    assert len(custom(" zebra quokka")["input_ids"]) == 2
    assert len(build_tokenizer()(" zebra")["input_ids"]) > 1
    assert build_tokenizer(["zebra", "quokka"]).get_vocab() == custom.get_vocab()
    with pytest.raises(ValueError, match="non-empty"):
        build_tokenizer(["ok", ""])


def test_special_tokens(tokenizer: Any) -> None:
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.eos_token == "<|endoftext|>"
    ids = tokenizer("<|im_start|>user\nhi<|im_end|><tool_call>")["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids
    # the tool-call marker is one token and survives skip_special_tokens
    assert tokenizer.decode(ids[-1:], skip_special_tokens=True) == "<tool_call>"


def test_chat_template_renders_tools_and_parses_back(tokenizer: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "max_digit",
                "description": "largest digit",
                "parameters": {"type": "object", "properties": {"digits": {"type": "string"}}},
            },
        }
    ]
    call = {"type": "function", "function": {"name": "max_digit", "arguments": '{"digits": "375"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "largest of 3 7 5?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "7"},
    ]
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n")
    assert '"name": "max_digit"' in text
    assert text.endswith("<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n")
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    content, calls = parse_tool_calls(turn)
    assert content is None
    assert [c["function"] for c in calls] == [call["function"]]
    plain = tokenizer.apply_chat_template(
        messages[1:2], tokenize=False, add_generation_prompt=False
    )
    assert plain == "<|im_start|>user\nlargest of 3 7 5?<|im_end|>\n"


def test_same_seed_same_weights_other_seed_differs() -> None:
    a, b, c = (build_tiny_model(100, seed=s) for s in (3, 3, 4))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["lm_head.weight"], sc["lm_head.weight"])


def test_saved_directory_loads_with_auto_classes(tmp_path: Path) -> None:
    out = save_tiny_model(tmp_path / "tiny", vocab=[*DEFAULT_WORDS, "zebra"], seed=5)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tok)
    assert (
        tok(" zebra")["input_ids"]
        == build_tokenizer([*DEFAULT_WORDS, "zebra"])(" zebra")["input_ids"]
    )
    assert tok.chat_template is not None
    ref = build_tiny_model(len(tok), seed=5)
    assert torch.equal(model.state_dict()["lm_head.weight"], ref.state_dict()["lm_head.weight"])
    assert set(model.generation_config.eos_token_id) == {
        tok.eos_token_id,
        tok.convert_tokens_to_ids("<|im_end|>"),
    }


def test_without_byte_fallback_the_output_space_is_the_task_vocabulary() -> None:
    words = ["max", *"0123456789"]
    small = build_tokenizer(words, byte_fallback=False)
    assert len(small) < 60 < 300 < len(build_tokenizer(words))
    # the chat template still renders, each word and digit one token
    ids: Any = small.apply_chat_template(
        [{"role": "user", "content": "max 7 3 6"}], add_generation_prompt=True, tokenize=True
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert small.decode(ids) == "<|im_start|>user\nmax 7 3 6<|im_end|>\n<|im_start|>assistant\n"
    assert small.convert_ids_to_tokens(small("max 7")["input_ids"]) == ["max", "Ġ", "7"]
