"""``data``: where the prompts come from and how they are fed to the rollout."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import MISSING, cfg_field

BAD_ROWS_CHOICES = ("error", "skip")


@dataclass
class DataConfig:
    """The prompt data set and the order it is read in."""

    # cfg_field returns a dataclasses.field (RUF009 cannot know).
    data_files: list[str] = cfg_field(
        MISSING,
        help="Prompt files, read and concatenated in the order given: parquet (.parquet, .pq), "
        "JSON lines (.jsonl) or JSON (.json: an array of rows, or JSON lines), one row per "
        "prompt. An entry with * ? or [ ] is a pattern (data/*.jsonl): its files, sorted.",
        path=True,
    )
    prompt_key: str = cfg_field(
        "prompt",
        help="Column holding the prompt: a string, or a list of chat messages "
        "{role, content} with string content.",
    )
    shuffle: bool = cfg_field(
        True,
        help="Shuffle the prompts every epoch (a fresh order per epoch, reproducible "
        "from seed and the epoch number).",
    )
    seed: int = cfg_field(42, help="Seed of the per-epoch shuffle.")
    max_prompt_length: int = cfg_field(
        1024,
        help="Prompts longer than this many tokens are dropped when the data is loaded; "
        "how many is logged and reported in the loader's stats.",
        minimum=1,
    )
    bad_rows: str = cfg_field(
        "error",
        help="What to do with a bad row (invalid JSON line, missing or ill-typed "
        "prompt, missing a field the evaluator lists in required_fields), checked in "
        "every row when the run starts: 'error' stops before the run (exit 2) naming "
        "each bad row's file and line, 'skip' drops them, names each, and counts them "
        "in the summary.",
        choices=BAD_ROWS_CHOICES,
    )
    drop_last: bool = cfg_field(
        False,
        help="When a batch of prompts is requested and fewer remain in the epoch, skip "
        "them and start the next epoch instead of returning a short batch.",
    )
    total_epochs: int | None = cfg_field(
        None,
        help="Passes over the data before the loader is exhausted; null = no limit "
        "(training length is then set by the trainer's step count).",
        minimum=1,
    )
    max_samples: int | None = cfg_field(
        None,
        help="Use only the first N prompts (after filtering, before shuffling), e.g. for a "
        "quick smoke run; null = all.",
        minimum=1,
    )
    sft_batch_size: int = cfg_field(
        16, help="mode: sft: conversations per optimizer step.", minimum=1
    )
    sft_max_length: int = cfg_field(
        1024,
        help="mode: sft: longest conversation in tokens (chat template applied); longer ones "
        "are dropped when the data is loaded (how many is logged); with sft_packing, also "
        "the length of a packed row.",
        minimum=2,
    )
    sft_packing: bool = cfg_field(
        False,
        help="mode: sft: false = one conversation per row, right-padded to the step's "
        "longest; true = the step's conversations concatenated into rows of up to "
        "sft_max_length tokens (first fit), positions restarting per conversation and a "
        "block-diagonal causal mask, so no token attends to another conversation (the "
        "loss is the same as padded; less padding computed).",
    )
