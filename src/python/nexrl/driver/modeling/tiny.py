"""A tiny Qwen2 causal LM and tokenizer built from config: no downloads.

The tokenizer is a real ``Qwen2Tokenizer`` (byte-level BPE, Qwen2 pre-tokenizer
regex) whose merges are learnt deterministically from a configurable list of
words: every word of the list is one token per Qwen2 pre-token (``largest``
and `` largest`` are single tokens, digits are always single tokens) and any
other text falls back to bytes, so every string encodes and decodes exactly.
Special tokens: ``<|pad|>`` (pad), ``<|endoftext|>`` (eos), ``<|im_start|>``,
``<|im_end|>``; ``<tool_call>``/``</tool_call>`` are single non-special tokens
(they survive ``skip_special_tokens``), as in Qwen2.5.

The chat template is Qwen style (``<|im_start|>role\\n...<|im_end|>``); it
renders ``tools`` into the system turn and writes assistant tool calls as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the Hermes/Qwen
format) which the inference server parses back into OpenAI ``tool_calls``.

``save_tiny_model(dir, vocab=..., seed=...)`` writes a directory that
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``
load; the same arguments give the same token ids and the same weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # heavy imports stay lazy: importing nexrl stays cheap
    from transformers import Qwen2ForCausalLM, Qwen2Tokenizer

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, IM_START, IM_END)
# Single tokens that stay in decoded text (like Qwen2.5's ``<tool_call>``).
MARKER_TOKENS: tuple[str, ...] = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

# Text the chat template writes, so a rendered prompt is short.
TEMPLATE_WORDS: tuple[str, ...] = (
    "system",
    "user",
    "assistant",
    "tool",
    "# Tools",
    "<tools>",
    "</tools>",
    "Call a tool as",
    '{"name": "',
    '", "arguments": ',
    '"type": "function", "function": {',
    "description",
    "parameters",
    "properties",
    "object",
    "integer",
    "string",
    "required",
)

# The chat roles: all the template needs without tools.
ROLE_WORDS: tuple[str, ...] = ("system", "user", "assistant", "tool")
# Default task words (the default recipe: "answer the largest of three digits").
DEFAULT_WORDS: tuple[str, ...] = (
    "What",
    "Which",
    "is",
    "the",
    "largest",
    "smallest",
    "of",
    "digit",
    "digits",
    "number",
    "answer",
    "Answer",
    "and",
    "three",
    "Think",
    "step",
    "by",
    "<answer>",
    "</answer>",
)
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    '{{- \'</tools>\\nCall a tool as <tool_call>{"name": NAME, "arguments": ARGS}'
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for tc in message.tool_calls or [] %}"
    "{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}"
    '{{- \'<tool_call>{"name": "\' + tc.name + \'", "arguments": \' }}'
    "{%- if tc.arguments is string %}{{- tc.arguments }}"
    "{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '}</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2 byte-level alphabet in byte order (the 256 base tokens)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _pieces(texts: Sequence[str]) -> list[str]:
    """Byte-level pre-tokens of ``texts`` (alone and after a space), as Qwen2 splits them."""
    from tokenizers import Regex, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    out: dict[str, None] = {}
    for text in texts:
        if not text:
            raise ValueError("vocabulary entries must be non-empty strings")
        for variant in (text, " " + text):
            for piece, _ in pre.pre_tokenize_str(variant):
                out.setdefault(piece)
    return list(out)


def _learn_merges(pieces: Sequence[str]) -> list[tuple[str, str]]:
    """Deterministic BPE: merge the most frequent pair (ties: smallest) until
    every piece is one token, so each vocabulary word encodes to one token
    per pre-token."""
    words = [list(p) for p in pieces if len(p) > 1]
    merges: list[tuple[str, str]] = []
    while True:
        counts: dict[tuple[str, str], int] = {}
        for w in words:
            for pair in itertools.pairwise(w):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            return merges
        best = min(counts, key=lambda pr: (-counts[pr], pr))
        merges.append(best)
        joined = best[0] + best[1]
        for i, w in enumerate(words):
            j, new = 0, []
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    new.append(joined)
                    j += 2
                else:
                    new.append(w[j])
                    j += 1
            words[i] = new
        words = [w for w in words if len(w) > 1]


def build_vocab(
    words: Sequence[str] = DEFAULT_WORDS, *, byte_fallback: bool = True
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(token -> id, merges): special/marker tokens, 256 bytes, then merged pieces.

    ``byte_fallback=False`` keeps only the bytes that ``words`` and the chat
    roles use (a much smaller output space: ~50 tokens instead of ~330 for the
    default recipe, so a tiny policy starts with a fair chance of a right
    answer); any other character is dropped when encoding, so this suits
    plain-text tasks, not tool calling.
    """
    template = TEMPLATE_WORDS if byte_fallback else ROLE_WORDS
    pieces = _pieces([*template, *words])
    merges = _learn_merges(pieces)
    alphabet = _byte_alphabet()
    if not byte_fallback:
        used = {ch for piece in [*pieces, *_pieces(["\n", " ", "\n\n"])] for ch in piece}
        alphabet = [ch for ch in alphabet if ch in used]
    vocab: dict[str, int] = {}
    for tok in [*SPECIAL_TOKENS, *MARKER_TOKENS, *alphabet]:
        vocab.setdefault(tok, len(vocab))
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    return vocab, merges


def build_tokenizer(
    words: Sequence[str] = DEFAULT_WORDS,
    *,
    byte_fallback: bool = True,
    added_tokens: Sequence[str] = (),
) -> Qwen2Tokenizer:
    """A Qwen2 (byte-level BPE) tokenizer whose vocabulary is ``words``.

    Any text encodes (unknown words fall back to bytes; without ``byte_fallback``
    unknown characters become ``<|endoftext|>``); each vocabulary word is one
    token per Qwen2 pre-token. ``added_tokens`` are whole strings that become
    single non-special tokens, matched in text before BPE (the longest match
    wins, like Qwen's ``<tool_call>``): e.g. tool-call markup, so a tiny model
    writes a call in a few tokens. ``AutoTokenizer`` reloads it unchanged.
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = build_vocab(words, byte_fallback=byte_fallback)
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=cast(Any, merges),  # tokenizers wants (left, right) tuples
        unk_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    extra = [t for t in dict.fromkeys(added_tokens) if t not in MARKER_TOKENS]
    if any(not t for t in extra):
        raise ValueError("added tokens must be non-empty strings")
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in [*MARKER_TOKENS, *extra]]
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(
    vocab_size: int,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 512,
    init_std: float = 0.2,
    pad_token_id: int | None = None,
    eos_token_ids: Sequence[int] = (),
) -> Qwen2ForCausalLM:
    """A seeded random ``Qwen2ForCausalLM``; same arguments -> same weights.

    ``init_std`` is larger than a real model's so greedy decoding has clear
    winners (outputs differ visibly between seeds).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=init_std,
        tie_word_embeddings=False,
        pad_token_id=pad_token_id,
        eos_token_id=list(eos_token_ids) or None,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # explicit, seeded init independent of library defaults
        gen = torch.Generator().manual_seed(seed)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * init_std)
    return model.eval()


def save_tiny_model(
    out_dir: str | Path,
    *,
    vocab: Sequence[str] = DEFAULT_WORDS,
    seed: int = 0,
    byte_fallback: bool = True,
    added_tokens: Sequence[str] = (),
    **model_kwargs: Any,
) -> Path:
    """Write tokenizer + seeded tiny model (safetensors) to ``out_dir``."""
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab, byte_fallback=byte_fallback, added_tokens=added_tokens)
    eos_ids = [int(cast(int, tokenizer.convert_tokens_to_ids(t))) for t in (EOS_TOKEN, IM_END)]
    model = build_tiny_model(
        len(tokenizer),
        seed=seed,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_ids,
        **model_kwargs,
    )
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
