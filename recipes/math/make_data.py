"""Write the math data: synthetic grade-school arithmetic word problems.

    python recipes/math/make_data.py                 # rewrites recipes/math/data/
    python recipes/math/make_data.py --out /tmp/d    # somewhere else

No download is needed (or possible): the problems are generated from ten
templates (shopping totals, change, sharing equally, packing, saving,
multi-step +, -, x and / with whole results, larger numbers written with
thousands separators). Every answer is a whole number. Each row is

    {"prompt": "<problem> Please reason step by step, ... \\boxed{}.", "answer": "42"}

``prompt`` is a plain string: the rollout worker sends it as the user turn of a
chat, so the model's chat template applies. The output is deterministic: the
same ``seed`` and sizes give the same files byte for byte, and the train and
test prompts are disjoint (every prompt in the two files is distinct).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

NAMES = (
    "Ava",
    "Ben",
    "Chloe",
    "Diego",
    "Emma",
    "Farah",
    "Grace",
    "Hiro",
    "Isla",
    "Jack",
    "Kofi",
    "Lena",
    "Mateo",
    "Nina",
    "Omar",
    "Priya",
    "Quinn",
    "Ravi",
    "Sofia",
    "Tom",
    "Uma",
    "Victor",
    "Wen",
    "Yara",
    "Zoe",
)
# (plural, lowest price, highest price) in whole dollars.
GOODS = (
    ("notebooks", 2, 9),
    ("pens", 1, 4),
    ("apples", 1, 3),
    ("books", 6, 25),
    ("movie tickets", 5, 15),
    ("sandwiches", 3, 9),
    ("toy cars", 2, 12),
    ("bags of rice", 8, 20),
    ("T-shirts", 7, 19),
    ("plants", 4, 16),
)
THINGS = ("stickers", "marbles", "cookies", "crayons", "stamps", "cards", "beads", "candies")
PRODUCTS = ("toys", "bottles", "bricks", "cups", "pencils", "buttons")

Problem = tuple[str, int]


def _shopping_total(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    (g1, lo1, hi1), (g2, lo2, hi2) = rng.sample(GOODS, 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p1, p2 = rng.randint(lo1, hi1), rng.randint(lo2, hi2)
    text = (
        f"{name} buys {a} {g1} at ${p1} each and {b} {g2} at ${p2} each. "
        f"How many dollars does {name} spend in total?"
    )
    return text, a * p1 + b * p2


def _change(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    goods, lo, hi = rng.choice(GOODS)
    bill = rng.choice((20, 50, 100))
    while True:
        a, p = rng.randint(2, 9), rng.randint(lo, hi)
        if a * p < bill:
            break
    text = (
        f"{name} has ${bill} and buys {a} {goods} that cost ${p} each. "
        f"How many dollars does {name} have left?"
    )
    return text, bill - a * p


def _sharing(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    things = rng.choice(THINGS)
    k, q = rng.randint(2, 12), rng.randint(2, 25)
    text = (
        f"{name} has {k * q} {things} and shares them equally among {k} friends. "
        f"How many {things} does each friend get?"
    )
    return text, q


def _packing(rng: random.Random) -> Problem:
    k, q = rng.randint(3, 12), rng.randint(4, 40)
    text = (
        f"A bakery makes {k * q} muffins and packs them into boxes of {k}. "
        "How many boxes does it fill?"
    )
    return text, q


def _gain_and_loss(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    things = rng.choice(THINGS)
    a = rng.randint(20, 99)
    b = rng.randint(1, a - 1)
    c, d = rng.randint(2, 6), rng.randint(3, 12)
    text = (
        f"{name} has {a} {things}. {name} gives away {b}, then buys {c} packs with {d} "
        f"{things} in each pack. How many {things} does {name} have now?"
    )
    return text, a - b + c * d


def _production(rng: random.Random) -> Problem:
    product = rng.choice(PRODUCTS)
    r, h = rng.randint(6, 30), rng.randint(2, 9)
    bad = rng.randint(1, r * h // 4)
    text = (
        f"A machine makes {r} {product} per hour. It runs for {h} hours, and {bad} of the "
        f"{product} are broken and thrown away. How many good {product} are left?"
    )
    return text, r * h - bad


def _teams(rng: random.Random) -> Problem:
    while True:
        c, s = rng.randint(2, 8), rng.randint(15, 32)
        sizes = [t for t in range(2, 21) if (c * s) % t == 0 and t not in (c, s)]
        if sizes:
            break
    t = rng.choice(sizes)
    text = (
        f"A school has {c} classes with {s} students each. All the students are split "
        f"into {t} equal teams. How many students are on each team?"
    )
    return text, c * s // t


def _stadium(rng: random.Random) -> Problem:
    rows, seats = rng.randint(20, 60), rng.randint(40, 150)
    total = rows * seats
    taken = rng.randint(total // 3, total - 1)
    text = (
        f"A stadium has {rows} rows with {seats} seats in each row. If {taken:,} seats are "
        "taken, how many seats are empty?"
    )
    return text, total - taken


def _savings(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    w, n = rng.randint(5, 40), rng.randint(3, 12)
    spent = rng.randint(w, w * n - 1)
    text = (
        f"{name} saves ${w} every week for {n} weeks and then spends ${spent} on a bike. "
        f"How many dollars does {name} have left?"
    )
    return text, w * n - spent


def _split_bill(rng: random.Random) -> Problem:
    k, q = rng.randint(2, 9), rng.randint(8, 60)
    text = (
        f"{k} friends share the cost of a ${k * q} dinner equally. "
        "How many dollars does each friend pay?"
    )
    return text, q


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    _shopping_total,
    _change,
    _sharing,
    _packing,
    _gain_and_loss,
    _production,
    _teams,
    _stadium,
    _savings,
    _split_bill,
)


def problems(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` distinct rows ``{"prompt", "answer"}``, templates drawn at random."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < n:
        attempts += 1
        if attempts > 50 * n:
            raise RuntimeError(f"could not generate {n} distinct problems")
        text, answer = rng.choice(TEMPLATES)(rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": f"{text} {INSTRUCTION}", "answer": str(answer)})
    return rows


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    """One JSON object per line, ``\\n`` line endings on every platform."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def make(out_dir: str | Path, n_train: int = 2000, n_test: int = 200, seed: int = 0) -> None:
    """Write ``out_dir/train.jsonl`` (``n_train`` rows) and ``out_dir/test.jsonl``
    (``n_test`` rows); all prompts distinct, so the test split is held out."""
    rows = problems(n_train + n_test, seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "test.jsonl", rows[:n_test])
    write_jsonl(out / "train.jsonl", rows[n_test:])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=HERE / "data", help="output folder")
    p.add_argument("--n-train", type=int, default=2000, help="training rows")
    p.add_argument("--n-test", type=int, default=200, help="held-out test rows")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    args = p.parse_args(argv)
    make(args.out, args.n_train, args.n_test, args.seed)


if __name__ == "__main__":
    main()
