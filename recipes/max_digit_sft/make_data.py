"""Write the SFT conversations of max_digit: the task's prompts with their correct answers.

    python recipes/max_digit_sft/make_data.py   # rewrites data/train.jsonl, data/val.jsonl

One OpenAI-style conversation per line, built from the max_digit prompt files
(``recipes/max_digit/data``: 210 training, 49 held-out prompts, disjoint):

    {"messages": [{"role": "user", "content": "max 4 3 9"},
                  {"role": "assistant", "content": "9"}]}

The held-out file is made from max_digit's test prompts, so the RL run that starts
from the SFT snapshot is validated on prompts the SFT run never trained on.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPTS = HERE.parent / "max_digit" / "data"


def conversation(row: dict[str, str]) -> dict[str, object]:
    return {
        "messages": [
            {"role": "user", "content": row["prompt"]},
            {"role": "assistant", "content": row["answer"]},
        ]
    }


def main() -> None:
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for src, dst in (("train", "train"), ("test", "val")):
        rows = [json.loads(line) for line in (PROMPTS / f"{src}.jsonl").read_text().splitlines()]
        text = "".join(json.dumps(conversation(r)) + "\n" for r in rows)
        (out / f"{dst}.jsonl").write_text(text)


if __name__ == "__main__":
    main()
