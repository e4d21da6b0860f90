"""Batched generation of the embedded server on a tiny model with known (seeded) weights,
through both decode loops: ``DecodeBatch`` (the model's own forward) and ``SlotBatch``
(decoder slots: a preallocated KV cache and fixed-shape steps)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from backends.inference.embedded.generation import DecodeBatch, generate, run_batch
from backends.inference.embedded.sampling import LogprobsMode, SamplingParams
from backends.inference.embedded.slot_batch import SlotBatch
from backends.inference.embedded.slot_decode import SlotDecoder, unsupported
from nexrl.driver.modeling import build_tiny_model, build_tokenizer

PROMPTS = [
    "What is the largest of 3 7 5?",
    "Answer",
    "Which digit is the smallest of 9 1 2? Think step by step",
]


@pytest.fixture(scope="module", params=["model", "slots"])
def lm(request: pytest.FixtureRequest) -> tuple[Any, Any, frozenset[int], str]:
    tok = build_tokenizer()
    stop = frozenset({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
    return build_tiny_model(len(tok), seed=11), tok, stop, request.param


def _batch(lm: Any, mode: LogprobsMode = "raw", *, width: int = 64, slots: int = 4) -> Any:
    """An empty batch of ``lm``'s decode loop (slots: a fresh cache of ``slots`` x
    ``width`` that grows as rows need)."""
    model, tok, stop, kind = lm
    kw: dict[str, Any] = {"stop_token_ids": stop, "pad_token_id": tok.pad_token_id}
    if kind == "model":
        return DecodeBatch(model, tok, logprobs_mode=mode, **kw)
    dec = SlotDecoder(model, slots=slots, width=width, graphs=False, budget_bytes=1 << 30)
    return SlotBatch(model, tok, dec, logprobs_mode=mode, **kw)


def _gen(
    lm: Any, rows: list[tuple[list[int], SamplingParams]], mode: LogprobsMode = "raw"
) -> list[Any]:
    return run_batch(_batch(lm, mode), rows)


def _ids(lm: Any, text: str) -> list[int]:
    return list(lm[1](text)["input_ids"])


def test_batched_greedy_equals_transformers_generate(lm: Any) -> None:
    model, tok, stop, _ = lm
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    outs = _gen(lm, [(_ids(lm, p), greedy) for p in PROMPTS])  # left-padded batch
    for prompt, out in zip(PROMPTS, outs, strict=True):
        ids = _ids(lm, prompt)
        ref = model.generate(
            torch.tensor([ids]),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=sorted(stop),
            pad_token_id=tok.pad_token_id,
        )[0, len(ids) :].tolist()
        assert out.token_ids == ref
        assert out.finish_reason == ("stop" if ref[-1] in stop else "length")


def test_logprobs_match_a_full_forward_pass(lm: Any) -> None:
    model = lm[0]
    ids = _ids(lm, PROMPTS[0])
    (out,) = _gen(lm, [(ids, SamplingParams(max_tokens=8, temperature=0.0, top_logprobs=3))])
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids + out.token_ids])).logits[0], -1)
    expected = [float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(out.token_ids)]
    assert out.logprobs == pytest.approx(expected, abs=1e-4)
    for top, tid, lp in zip(out.top_logprobs, out.token_ids, out.logprobs, strict=True):
        assert len(top) == 3 and top[0] == (tid, pytest.approx(lp))  # greedy = best token


def test_seeded_sampling_is_independent_of_the_batch(lm: Any) -> None:
    p = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, seed=1234)
    other = SamplingParams(max_tokens=4, temperature=0.7, seed=5)
    alone = _gen(lm, [(_ids(lm, PROMPTS[1]), p)])[0]
    batched = _gen(lm, [(_ids(lm, PROMPTS[2]), other), (_ids(lm, PROMPTS[1]), p)])[1]
    assert alone.token_ids == batched.token_ids
    reseeded = _gen(lm, [(_ids(lm, PROMPTS[1]), SamplingParams(max_tokens=10, seed=99))])[0]
    assert reseeded.token_ids != alone.token_ids


def test_tiny_top_p_is_greedy_and_processed_logprobs_are_zero(lm: Any) -> None:
    ids = _ids(lm, PROMPTS[0])
    greedy = _gen(lm, [(ids, SamplingParams(max_tokens=6, temperature=0.0))])[0]
    nucleus = SamplingParams(max_tokens=6, temperature=1.0, top_p=1e-6, seed=3)
    (out,) = _gen(lm, [(ids, nucleus)], mode="processed")
    assert out.token_ids == greedy.token_ids
    assert out.logprobs == pytest.approx([0.0] * 6, abs=1e-6)
    (raw,) = _gen(lm, [(ids, nucleus)], mode="raw")
    assert raw.logprobs == pytest.approx(greedy.logprobs, abs=1e-5)


def test_stop_string_cuts_text_but_keeps_token_ids(lm: Any) -> None:
    ids = _ids(lm, PROMPTS[2])
    (free,) = _gen(lm, [(ids, SamplingParams(max_tokens=12, temperature=0.0))])
    assert len(free.text) > 3
    stop_at = free.text[2:4]
    (out,) = _gen(lm, [(ids, SamplingParams(max_tokens=12, temperature=0.0, stop=(stop_at,)))])
    assert out.finish_reason == "stop"
    assert out.text == free.text[: free.text.find(stop_at)]
    assert out.token_ids == free.token_ids[: len(out.token_ids)]


def test_rows_finish_independently(lm: Any) -> None:
    ids = _ids(lm, PROMPTS[0])
    short, long_ = (SamplingParams(max_tokens=n, temperature=0.0) for n in (2, 9))
    a, b = _gen(lm, [(ids, short), (ids, long_)])
    assert len(a.token_ids) == 2 and a.finish_reason == "length"
    assert b.token_ids[:2] == a.token_ids and len(b.token_ids) <= 9
    assert _gen(lm, []) == []


def test_rows_joining_a_running_batch_generate_as_alone(lm: Any) -> None:
    """Continuous batching: rows added while others are mid-answer (with another
    prompt length, so both KV caches are left-padded to one length) and a finished row
    leaving the batch change nobody's tokens or log-probs: each row's answer equals
    the one it gets alone, greedy and seeded alike."""
    first = [
        (_ids(lm, PROMPTS[0]), SamplingParams(max_tokens=10, temperature=0.0)),
        (_ids(lm, PROMPTS[1]), SamplingParams(max_tokens=3, temperature=1.0, seed=7)),
    ]
    later = [
        (_ids(lm, PROMPTS[2]), SamplingParams(max_tokens=8, temperature=0.9, seed=21)),
        (_ids(lm, PROMPTS[1]), SamplingParams(max_tokens=6, temperature=0.0, top_logprobs=2)),
    ]
    batch = _batch(lm, width=8, slots=1)  # (slots: the cache grows as rows join)
    batch.add(first)
    states = list(batch.rows)
    finished = batch.retire()
    for step in range(4):
        if step == 2:
            batch.add(later)
            states += batch.rows[-2:]
        batch.step()
        finished += batch.retire()
        if step == 3:
            assert len(batch) < 4  # the 3-token row has left the batch
    while len(batch):
        batch.step()
        finished += batch.retire()
    assert sorted(map(id, finished)) == sorted(map(id, states))  # each retired once
    for (ids, params), st in zip(first + later, states, strict=True):
        (alone,) = _gen(lm, [(ids, params)])
        assert st.out.token_ids == alone.token_ids
        assert st.out.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
        assert st.out.text == alone.text and st.out.finish_reason == alone.finish_reason


def test_rows_sharing_a_prompt_share_one_prefill(lm: Any) -> None:
    """A request's n choices (rows with one prompt) are prefilled once per distinct
    prompt (the model's first forward sees 2 rows for 5), and every row still gets
    the answer it gets alone."""
    model = lm[0]
    a, b = _ids(lm, PROMPTS[0]), _ids(lm, PROMPTS[2])
    rows = [
        (a, SamplingParams(max_tokens=6, seed=1, ignore_eos=True)),
        (b, SamplingParams(max_tokens=6, seed=2, ignore_eos=True)),
        (a, SamplingParams(max_tokens=6, seed=3, ignore_eos=True)),
        (a, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)),
        (b, SamplingParams(max_tokens=6, temperature=0.8, seed=4, ignore_eos=True)),
    ]
    seen: list[tuple[int, ...]] = []
    hook = model.register_forward_hook(
        lambda _m, _args, kwargs, _out: seen.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        outs = _gen(lm, rows)
    finally:
        hook.remove()
    assert seen[0] == (2, max(len(a), len(b)))  # one prefill row per distinct prompt
    if lm[3] == "model":  # every row decodes; the short one leaves
        assert seen[1:] == [(5, 1)] * 3 + [(4, 1)] * 2
    else:  # (slots decode through the layers' modules, not the model's forward)
        assert seen[1:] == []
    for row, out in zip(rows, outs, strict=True):
        (alone,) = _gen(lm, [row])
        assert out.token_ids == alone.token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert outs[0].token_ids != outs[2].token_ids  # same prompt, other seed


def test_a_cache_that_cannot_shrink_keeps_finished_rows_until_all_are_done(lm: Any) -> None:
    """A sliding-window model's cache is not a plain DynamicCache: its batch takes no
    rows while running and keeps finished rows (fed along) until the last is done;
    every row still equals transformers' own greedy generate."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _, tok, stop, _ = lm
    torch.manual_seed(3)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=6,
        max_window_layers=0,
        layer_types=["sliding_attention", "sliding_attention"],
    )
    model = Qwen2ForCausalLM(cfg).eval()
    assert unsupported(model) == "sliding-window attention layers"  # (slots cannot serve it)
    rows = [
        (_ids(lm, PROMPTS[0]), SamplingParams(max_tokens=2, temperature=0.0)),
        (_ids(lm, PROMPTS[2]), SamplingParams(max_tokens=9, temperature=0.0)),
    ]
    batch = DecodeBatch(model, tok, stop_token_ids=stop, pad_token_id=tok.pad_token_id)
    batch.add(rows)
    assert not batch.joinable
    with pytest.raises(RuntimeError, match="cannot take rows"):
        batch.add(rows[:1])
    outs = generate(model, tok, rows, stop_token_ids=stop, pad_token_id=tok.pad_token_id)
    for (ids, p), out in zip(rows, outs, strict=True):
        ref = model.generate(
            torch.tensor([ids]),
            max_new_tokens=p.max_tokens,
            do_sample=False,
            eos_token_id=sorted(stop),
            pad_token_id=tok.pad_token_id,
        )[0, len(ids) :].tolist()
        assert out.token_ids == ref


def test_sample_next_by_hand() -> None:
    """Inverse-transform sampling on hand-made rows: probabilities (0.2, 0.3, 0.5) have
    the cumulative (0.2, 0.5, 1.0), so the draws 0.1 / 0.3 / 0.6 / 0.99 pick tokens
    0 / 1 / 2 / 2; temperature 0 is the argmax whatever the draw; top_p 0.6 keeps the
    0.5 and 0.3 tokens (the mass above the 0.2 token is 0.8 >= 0.6), renormalised to
    (0, 0.375, 0.625): draw 0.3 -> token 1, draw 0.4 -> token 2."""
    from backends.inference.embedded.sampling import sample_next

    row = torch.log(torch.tensor([0.2, 0.3, 0.5]))
    logits = row.repeat(7, 1)
    temperature = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.6, 0.6])
    uniform = torch.tensor([0.1, 0.3, 0.6, 0.99, 0.1, 0.3, 0.4])
    tokens, lp = sample_next(logits, temperature, top_p, uniform)
    assert tokens.tolist() == [0, 1, 2, 2, 2, 1, 2]
    assert torch.allclose(lp[0], row)  # raw log-probs reported
    _, processed = sample_next(logits, temperature, top_p, uniform, mode="processed")
    assert torch.allclose(processed[5].exp(), torch.tensor([0.0, 0.375, 0.625]))
    assert torch.allclose(processed[4], row)  # a greedy row reports raw log-probs


def test_a_model_served_on_slots_can_still_be_deep_copied(lm: Any) -> None:
    """The server's reload deep-copies the served model when no spare is free: the
    decoder keeps its graphs and tables beside the model, not on it, and the copy
    (new tensors) decodes through the same decoder to the same tokens."""
    import copy

    model, tok, stop, _ = lm
    dec = SlotDecoder(model, slots=2, width=16, graphs=False, budget_bytes=1 << 30)
    rows = [(_ids(lm, PROMPTS[0]), SamplingParams(max_tokens=6, seed=5, ignore_eos=True))]
    kw: dict[str, Any] = {"stop_token_ids": stop, "pad_token_id": tok.pad_token_id}
    first = run_batch(SlotBatch(model, tok, dec, **kw), rows)
    twin = copy.deepcopy(model)
    again = run_batch(SlotBatch(twin, tok, dec, **kw), rows)
    assert again[0].token_ids == first[0].token_ids


def test_the_service_says_why_slots_cannot_serve_a_model(lm: Any) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from backends.inference.embedded.service import BatchingConfig, InferenceService
    from backends.inference.embedded.weights import LoadedModel

    _, tok, _, _ = lm
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=6,
        max_window_layers=0,
        layer_types=["sliding_attention"],
    )
    loaded = LoadedModel(model=Qwen2ForCausalLM(cfg).eval(), version=0, path="m")
    kw: dict[str, Any] = {"device": torch.device("cpu"), "dtype": torch.float32}
    with pytest.raises(ValueError, match="--decoder slots cannot serve this model: sliding"):
        InferenceService(loaded, tok, batching=BatchingConfig(decoder="slots"), **kw)
    auto = InferenceService(loaded, tok, batching=BatchingConfig(decoder="auto"), **kw)
    assert auto.decoder == "model"
    served = InferenceService(
        LoadedModel(model=lm[0], version=0, path="m"), tok, batching=BatchingConfig(), **kw
    )
    assert served.decoder == "slots"
