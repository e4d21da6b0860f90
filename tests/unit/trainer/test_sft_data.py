"""SFT from a dataset: label mask, padding and packing against hand-computed fixtures,
then through the SFT trainer's own loss path (``SelfHostedSftTrainer`` on a plain engine)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.conversations import WarmStartError
from nexrl.driver.modeling import build_tokenizer
from nexrl.trainer.ops import model_inputs, response_log_probs
from nexrl.trainer.sft_data import SftDataset, encode_files, sft_batch
from tests.unit.trainer._helpers import TRAINER_MODEL, spec
from tests.unit.trainer._plain_engine import plain_trainer

WORDS = ["max", *"0123456789"]

# Hand-made examples: (ids, label mask); the first id is the one-token prompt.
A = ([5, 6, 7, 8], [0, 0, 1, 1])
B = ([9, 10, 11], [0, 1, 1])
C = ([12, 13, 14, 15, 16], [0, 0, 0, 1, 1])


@pytest.fixture(scope="module")
def tiny_model_dir(tiny_model: Callable[..., Path]) -> Path:
    return tiny_model(vocab=WORDS, byte_fallback=False, **TRAINER_MODEL)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def convo(a: int, b: int, c: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": f"max {a} {b} {c}"},
            {"role": "assistant", "content": str(max(a, b, c))},
        ]
    }


def test_label_mask_is_the_assistant_answer_and_its_stop_token(tmp_path: Path) -> None:
    tok: Any = build_tokenizer(WORDS, byte_fallback=False)
    stop = [int(tok.convert_tokens_to_ids("<|im_end|>"))]
    f = write_jsonl(tmp_path / "c.jsonl", [convo(4, 3, 9), convo(1, 2, 0)])
    (ids, mask), (ids2, mask2) = encode_files(tok, [f], "data.data_files", 64, stop)
    full = tok.apply_chat_template(convo(4, 3, 9)["messages"], tokenize=True, return_dict=False)
    assert ids == list(full)
    assert tok.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "9<|im_end|>"
    assert tok.decode([t for t, m in zip(ids2, mask2, strict=True) if m]) == "2<|im_end|>"
    assert sum(mask) == 2 and mask[-2:] in ([1, 1], [1, 0])  # answer + <|im_end|> (+ "\n")


def test_bad_row_names_field_file_row_and_key(tmp_path: Path) -> None:
    tok: Any = build_tokenizer(WORDS, byte_fallback=False)
    bad: dict[str, Any] = {
        "messages": [{"role": "user", "content": "max 1 2 3"}, {"role": "assistant", "content": 3}]
    }
    f = write_jsonl(tmp_path / "c.jsonl", [convo(1, 2, 3), bad])
    with pytest.raises(WarmStartError, match=r"^data\.data_files: .*c\.jsonl:2: messages\[1\]"):
        encode_files(tok, [f], "data.data_files", 64, [0])


def test_too_long_conversations_are_dropped_and_none_left_is_an_error(tmp_path: Path) -> None:
    tok: Any = build_tokenizer(WORDS, byte_fallback=False)
    f = write_jsonl(tmp_path / "c.jsonl", [convo(1, 2, 3)])
    with pytest.raises(ValueError, match=r"data\.sft_max_length=3"):
        encode_files(tok, [f], "data.data_files", 3, [0])


def test_padding_layout_by_hand() -> None:
    b = sft_batch([A, B], pad_token_id=0, packing=False, max_length=64)
    assert b.meta["packed"] is False
    assert b["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, 11, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 2]]
    assert b["prompts"].tolist() == [[5], [9]]
    assert b["responses"].tolist() == [[6, 7, 8], [10, 11, 0]]
    assert b["response_mask"].tolist() == [[0, 1, 1], [1, 1, 0]]


def test_packing_layout_by_hand() -> None:
    # capacity 8: A (4) + B (3) share row 0, C (5) opens row 1 (first fit, in order)
    b = sft_batch([A, C, B], pad_token_id=0, packing=True, max_length=8)
    assert b.meta["packed"] is True
    assert b["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 4, 0, 1]]
    assert b["attention_mask"].tolist() == [[1] * 7, [1, 1, 1, 1, 1, 0, 0]]
    # B's first token (9) follows A in the row but is never a label
    assert b["response_mask"].tolist() == [[0, 1, 1, 0, 1, 1], [0, 0, 1, 1, 0, 0]]
    assert model_inputs(b)["attention_mask"] is None  # the positions give the block mask


def _nll_by_hand(model_dir: Path, examples: list[tuple[list[int], list[int]]]) -> float:
    """Token-mean cross-entropy over the labels, one conversation per forward."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in examples:
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
            lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])
            m = torch.tensor(mask[1:], dtype=torch.float32)
            total += float(-(lp[:, 0] * m).sum())
            count += int(m.sum())
    return total / count


@pytest.mark.parametrize("packing", [False, True])
def test_trainer_loss_is_the_per_conversation_cross_entropy(
    tiny_model_dir: Path, packing: bool
) -> None:
    """Through the trainer: validation_loss (the trainer's forward on the batch) and the
    step's actor/sft_loss equal the cross-entropy computed one conversation at a time,
    so packing lets no token see another conversation."""
    examples = [A, C, B, ([17, 18, 19], [0, 0, 1])]
    expected = _nll_by_hand(tiny_model_dir, examples)
    trainer = plain_trainer(spec(tiny_model_dir, trainer={"type": "self_hosted_sft"}))
    batch = sft_batch(examples, pad_token_id=0, packing=packing, max_length=8)
    assert len(batch) == (2 if packing else 4)
    val = trainer.validation_loss(batch)
    assert val["tokens"] == 7
    assert val["nll_sum"] / val["tokens"] == pytest.approx(expected, rel=1e-5)
    result = trainer.step(batch)
    assert result.metrics["actor/sft_loss"] == pytest.approx(expected, rel=1e-5)


def test_packed_log_probs_equal_padded_ones(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    packed = sft_batch([A, B], pad_token_id=0, packing=True, max_length=8)
    padded = sft_batch([A, B], pad_token_id=0, packing=False, max_length=8)
    with torch.no_grad():
        lp_packed, _ = response_log_probs(
            model(**model_inputs(packed)).logits, 1, packed["responses"], entropy_grad=None
        )
        lp_padded, _ = response_log_probs(
            model(**model_inputs(padded)).logits, 1, padded["responses"], entropy_grad=None
        )
    # A is row 0 in both; B sits at response positions 3.. of the packed row (its first
    # token 9 is the "response" after A, unlabelled), positions 0.. of padded row 1
    torch.testing.assert_close(lp_packed[0, :3], lp_padded[0, :3])
    torch.testing.assert_close(lp_packed[0, 4:6], lp_padded[1, :2])


def test_dataset_order_is_seeded_and_resumes_exactly() -> None:
    examples = [([i, i + 1], [0, 1]) for i in range(10)]
    a = SftDataset(examples, batch_size=4, seed=3)
    first = [a.next_examples() for _ in range(3)]  # 12 > 10: into epoch 1
    assert a.epoch == 1 and a.cursor == 2
    b = SftDataset(examples, batch_size=4, seed=3)
    b.next_examples()
    state = b.state_dict()
    c = SftDataset(examples, batch_size=4, seed=3)
    c.load_state_dict(state)
    assert [c.next_examples() for _ in range(2)] == first[1:]
    epoch0 = {e[0][0] for bt in first[:2] for e in bt} | {e[0][0] for e in first[2][:2]}
    assert epoch0 == set(range(10))  # every conversation once per epoch
    with pytest.raises(ValueError, match="written for 10 conversations"):
        SftDataset(examples[:5], batch_size=2).load_state_dict(state)


def test_the_last_turn_of_a_conversation_is_its_prompt_and_answer() -> None:
    """(ids, mask) of a two-turn conversation: the answer is the last run of label
    tokens (its stop token included), the prompt everything before it, the earlier
    assistant turn included."""
    from nexrl.trainer.sft_data import last_turn

    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    mask = [0, 0, 1, 1, 0, 0, 1, 1, 0]
    assert last_turn((ids, mask)) == ([1, 2, 3, 4, 5, 6], [7, 8])
    assert last_turn(([5, 6, 7], [0, 1, 1])) == ([5], [6, 7])
