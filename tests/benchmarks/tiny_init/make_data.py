"""Write the data of the tiny-model init benchmark (tests/benchmarks/test_bench_tiny_init.py)
into a folder given at run time: two small tasks that a model can only solve by
reading its whole prompt.

    python tests/benchmarks/tiny_init/make_data.py OUT_DIR [--seed 0]

* ``digit_sum``: "sum 47" -> "1", the digit sum of a two-digit number mod 10
  (4 + 7 = 11 -> 1): a lookup on both digits, one-token answer. The numbers
  10..99 give each answer exactly 9 times; 3 of each are held out: 60 training,
  30 validation prompts, disjoint, balanced over the answers.
* ``sort3``: "sort 4 3 9" -> "349", three digits in ascending order, written
  together like recipes/top_two's answers (the tiny tokenizer makes every digit one
  token: three tokens; "3 4 9" would be five). recipes/max_digit's split of the
  1000 triples (balanced over the largest digit 3..9, 37 each, 7 held out): 210
  training, 49 validation prompts, disjoint.

Each task's folder holds the RL files (``train.jsonl``, ``val.jsonl``: ``prompt``,
``answer``) and the same prompts as SFT conversations in the format of
recipes/max_digit_sft (``sft_train.jsonl``, ``sft_val.jsonl``: one OpenAI-style
``messages`` list per line). Same seed, same files.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

TASKS = ("digit_sum", "sort3")
# The vocabulary of each task's tiny tokenizer (model.tiny.vocab), as the tiny recipes
# list theirs: the prompt's word and the ten digits.
VOCAB = {
    "digit_sum": ["sum", *map(str, range(10))],
    "sort3": ["sort", *map(str, range(10))],
}
ANSWER_TOKENS = {"digit_sum": 1, "sort3": 3}  # rollout_worker.max_response_length

Row = dict[str, str]


def digit_sum_split(seed: int = 0) -> tuple[list[Row], list[Row]]:
    """(train, val): 60 and 30 prompts, 6 and 3 per answer 0..9."""
    rng = random.Random(seed)
    train: list[Row] = []
    val: list[Row] = []
    for answer in range(10):
        numbers = [n for n in range(10, 100) if (n // 10 + n % 10) % 10 == answer]
        rng.shuffle(numbers)
        rows = [{"prompt": f"sum {n}", "answer": str(answer)} for n in numbers]
        val += rows[:3]
        train += rows[3:]
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def sort3_split(seed: int = 0) -> tuple[list[Row], list[Row]]:
    """(train, val): 210 and 49 triples, recipes/max_digit/make_data.py's balanced split."""
    triples = list(itertools.product(range(10), repeat=3))
    random.Random(seed).shuffle(triples)
    train: list[tuple[int, ...]] = []
    val: list[tuple[int, ...]] = []
    for largest in range(3, 10):
        chosen = [t for t in triples if max(t) == largest][:37]
        val += chosen[:7]
        train += chosen[7:]
    random.Random(seed + 1).shuffle(train)
    random.Random(seed + 2).shuffle(val)

    def rows(part: list[tuple[int, ...]]) -> list[Row]:
        return [
            {"prompt": "sort " + " ".join(map(str, t)), "answer": "".join(map(str, sorted(t)))}
            for t in part
        ]

    return rows(train), rows(val)


def conversation(row: Row) -> dict[str, object]:
    return {
        "messages": [
            {"role": "user", "content": row["prompt"]},
            {"role": "assistant", "content": row["answer"]},
        ]
    }


def write_jsonl(path: Path, rows: list[dict[str, object]] | list[Row]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_task(task: str, out: Path, seed: int = 0) -> Path:
    """Write ``task``'s four files into ``out/task``; the folder."""
    split = {"digit_sum": digit_sum_split, "sort3": sort3_split}[task]
    train, val = split(seed)
    folder = out / task
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "train.jsonl", train)
    write_jsonl(folder / "val.jsonl", val)
    write_jsonl(folder / "sft_train.jsonl", [conversation(r) for r in train])
    write_jsonl(folder / "sft_val.jsonl", [conversation(r) for r in val])
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write <task>/*.jsonl into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the splits (default 0)")
    args = parser.parse_args(argv)
    for task in TASKS:
        print(write_task(task, args.out, args.seed))


if __name__ == "__main__":
    main()
