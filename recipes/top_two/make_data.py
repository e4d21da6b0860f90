"""Write the top_two data: prompts 'top a b c', answer = the two largest digits,
largest first, written together ("top 4 3 9" -> "94").

    python recipes/top_two/make_data.py   # rewrites data/*.jsonl

A task that a tiny model does NOT learn from scratch with the default recipe
(docs/user-guide.md, "When it does not learn"): the answer is two tokens and only
the exact pair is rewarded, so a random policy (55 tokens) is right once in ~3000
samples and nearly every group of 8 has the same reward, 0, for all its samples:
GRPO has nothing to learn from. The files:

* ``train.jsonl`` / ``test.jsonl``: 210 training and 49 held-out prompts,
  disjoint: recipes/max_digit's triples, balanced over the largest digit 3..9.
* ``demos.jsonl``: 70 demonstrations (one in three training prompts with its
  answer), OpenAI-style conversations for the SFT warm start.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_DIGIT = HERE.parent / "max_digit" / "make_data.py"


def answer(digits: tuple[int, ...]) -> str:
    """The two largest digits, largest first ("4 3 9" -> "94"; "9 3 9" -> "99")."""
    top = sorted(digits, reverse=True)[:2]
    return f"{top[0]}{top[1]}"


def split() -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """max_digit's (train, test) triples: the same prompts, balanced over the largest
    digit 3..9 (recipes/max_digit/make_data.py says why), answered with two digits."""
    spec = importlib.util.spec_from_file_location("max_digit_data", MAX_DIGIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.split()


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
