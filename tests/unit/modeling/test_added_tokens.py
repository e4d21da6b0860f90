"""``model.tiny.added_tokens``: whole strings as single tokens of the tiny tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from nexrl.driver.modeling import build_tokenizer, save_tiny_model

CALL = '<tool_call>{"name": "calculator", "arguments": {"a": '
WORDS = ["add", *"0123456789"]


def test_added_strings_are_single_tokens_and_the_longest_match_wins(tmp_path: Path) -> None:
    text = CALL + '12, "b": 34}}</tool_call>'
    plain = build_tokenizer(WORDS)
    tok = build_tokenizer(WORDS, added_tokens=[CALL, ', "b": ', "}}</tool_call>"])
    assert len(tok) == len(plain) + 3
    pieces = [tok.decode([i]) for i in tok(text)["input_ids"]]
    # CALL starts with the marker token <tool_call>: the longer string wins
    assert pieces == [CALL, "1", "2", ', "b": ', "3", "4", "}}</tool_call>"]
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    assert len(plain(text)["input_ids"]) > 20
    saved = save_tiny_model(tmp_path / "m", vocab=WORDS, added_tokens=[CALL])
    assert AutoTokenizer.from_pretrained(saved)(CALL)["input_ids"] == tok(CALL)["input_ids"]


def test_an_empty_added_token_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        build_tokenizer(WORDS, added_tokens=[""])
