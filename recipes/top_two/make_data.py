"""Write the top_two data: prompts 'top a b c', answer = the two largest digits,
largest first, written together ("top 4 3 9" -> "94").

    python recipes/top_two/make_data.py   # rewrites data/*.jsonl

A task that a tiny model does NOT learn from scratch with the default recipe
(docs/user-guide.md, "When it does not learn"): the answer is two tokens and only
the exact pair is rewarded, so a random policy (55 tokens) is right once in ~3000
samples and nearly every group of 8 has the same reward, 0, for all its samples:
GRPO has nothing to learn from. The files:

* ``train.jsonl`` / ``test.jsonl``: 210 training and 49 held-out prompts,
  disjoint, balanced over the largest digit 3..9 (as recipes/max_digit).
* ``demos.jsonl``: 70 demonstrations (one in three training prompts with its
  answer), OpenAI-style conversations for the SFT warm start.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_ANSWER, TEST_PER_ANSWER = 37, 7


def answer(digits: tuple[int, ...]) -> str:
    """The two largest digits, largest first ("4 3 9" -> "94"; "9 3 9" -> "99")."""
    top = sorted(digits, reverse=True)[:2]
    return f"{top[0]}{top[1]}"


def split(seed: int = 0) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(train, test) triples, balanced over the largest digit 3..9."""
    triples = list(itertools.product(range(10), repeat=3))
    random.Random(seed).shuffle(triples)
    train: list[tuple[int, ...]] = []
    test: list[tuple[int, ...]] = []
    for top in range(3, 10):
        chosen = [t for t in triples if max(t) == top][:PER_ANSWER]
        test += chosen[:TEST_PER_ANSWER]
        train += chosen[TEST_PER_ANSWER:]
    random.Random(seed + 1).shuffle(train)
    random.Random(seed + 2).shuffle(test)
    return train, test


def prompt(t: tuple[int, ...]) -> str:
    return "top " + " ".join(map(str, t))


def write(name: str, rows: list[dict[str, object]]) -> None:
    (HERE / "data" / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    (HERE / "data").mkdir(exist_ok=True)
    train, test = split()
    for name, part in (("train", train), ("test", test)):
        write(f"{name}.jsonl", [{"prompt": prompt(t), "answer": answer(t)} for t in part])
    demos = [
        {
            "messages": [
                {"role": "user", "content": prompt(t)},
                {"role": "assistant", "content": answer(t)},
            ]
        }
        for t in train[::3]
    ]
    write("demos.jsonl", demos)


if __name__ == "__main__":
    main()
