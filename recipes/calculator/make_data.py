"""Write the calculator data: prompts 'add a b' (a, b in 0..49), answer a + b.

    python recipes/calculator/make_data.py

2500 pairs, shuffled: 250 held-out test prompts, 2250 for training.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    pairs = list(itertools.product(range(50), repeat=2))
    random.Random(0).shuffle(pairs)
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, part in (("test", pairs[:250]), ("train", pairs[250:])):
        with open(out / f"{name}.jsonl", "w") as f:
            for a, b in part:
                f.write(json.dumps({"prompt": f"add {a} {b}", "answer": str(a + b)}) + "\n")


if __name__ == "__main__":
    main()
