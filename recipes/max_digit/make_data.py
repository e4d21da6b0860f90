"""Write the max_digit data: prompts 'max a b c', answer = the largest digit.

    python recipes/max_digit/make_data.py   # rewrites data/train.jsonl, data/test.jsonl

1000 distinct training prompts (of the 1000 ordered digit triples) and 100 test
prompts drawn from the same space with another seed.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rows(triples: list[tuple[int, int, int]]) -> list[dict[str, object]]:
    return [{"prompt": f"max {a} {b} {c}", "answer": str(max(a, b, c))} for a, b, c in triples]


def main() -> None:
    triples = list(itertools.product(range(10), repeat=3))
    random.Random(0).shuffle(triples)
    test = random.Random(1).sample(triples, 100)
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, part in (("train", triples), ("test", test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for row in rows(part):
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
