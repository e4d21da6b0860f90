"""Write the max_digit data: prompts 'max a b c', answer = the largest digit.

    python recipes/max_digit/make_data.py   # rewrites data/train.jsonl, data/test.jsonl

The answers are balanced: for each largest digit 3..9, 37 distinct triples with
that maximum (7 held out for test, 30 for training): 210 training and 49 test
prompts, disjoint. Balance matters for RL from scratch: over all 1000 triples
the largest digit is 9 for 27% and 7-9 for 66% of the prompts, and a tiny policy
settles on answering 7, 8 or 9 (reward ~0.65) instead of learning to compare.
Maxima 0-2 are left out: only 1, 7 and 19 triples have them.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_ANSWER, TEST_PER_ANSWER = 37, 7


def rows(triples: list[tuple[int, ...]]) -> list[dict[str, object]]:
    return [{"prompt": f"max {a} {b} {c}", "answer": str(max(a, b, c))} for a, b, c in triples]


def split(seed: int = 0) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(train, test) triples, balanced over the answers 3..9."""
    triples = list(itertools.product(range(10), repeat=3))
    random.Random(seed).shuffle(triples)
    train: list[tuple[int, ...]] = []
    test: list[tuple[int, ...]] = []
    for answer in range(3, 10):
        chosen = [t for t in triples if max(t) == answer][:PER_ANSWER]
        test += chosen[:TEST_PER_ANSWER]
        train += chosen[TEST_PER_ANSWER:]
    random.Random(seed + 1).shuffle(train)
    random.Random(seed + 2).shuffle(test)
    return train, test


def main() -> None:
    train, test = split()
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, part in (("train", train), ("test", test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for row in rows(part):
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
