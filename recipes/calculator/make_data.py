"""Write the calculator data: prompts 'add a b' (two-digit a, b), answer a + b,
and the warm-start demonstrations.

    python recipes/calculator/make_data.py   # rewrites data/{train,test,demos}.jsonl

8100 pairs (a, b in 10..99), shuffled: 200 held-out test prompts, the rest for
training. Two-digit sums are mostly beyond what the tiny model can compute by
itself, so a right answer needs the calculator tool.

``demos.jsonl`` (model.tiny.warm_start.data_files) holds DEMOS conversations
on training prompts, rendered with the agent's system prompt and tools. They
teach the format, not the policy: a share TOOL_SHARE of them call
``calculator`` with the prompt's numbers and copy its result as the answer;
the others answer directly, and wrongly: with the first number (``add 53 98``
-> ``53``), as a model that cannot add in its head might. So the
warm-started model calls the tool in about half of its episodes and is right
almost only when it does; RL (reward 1 for the right final answer) has to
find out that calling it pays. Measured alternatives (docs/benchmarks.md):
right sums as direct answers taught some init seeds to compute sums
themselves, leaving RL little to learn; random guesses added noise that kept
some init seeds from learning to copy numbers at all.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TEST, DEMOS, TOOL_SHARE = 200, 4000, 0.5


def agent_prompt_and_tools() -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and OpenAI tools of agent_config.yaml, as the agent sends them."""
    cfg = yaml.safe_load((HERE / "agent_config.yaml").read_text())
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["parameters"],
            },
        }
        for t in cfg["tools"]
    ]
    return str(cfg["system_prompt"]), tools


def demo(
    a: int, b: int, answer: int, use_tool: bool, system: str, tools: list[dict[str, Any]]
) -> dict:
    """A conversation: the tool call and its result (when ``use_tool``), then ``answer``."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"add {a} {b}"},
    ]
    if use_tool:
        call = {"name": "calculator", "arguments": json.dumps({"a": a, "b": b})}
        messages += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": call}],
            },
            {"role": "tool", "content": str(a + b)},
        ]
    messages.append({"role": "assistant", "content": str(answer)})
    return {"messages": messages, "tools": tools}


def split(seed: int = 0) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train, test) pairs."""
    pairs = list(itertools.product(range(10, 100), repeat=2))
    random.Random(seed).shuffle(pairs)
    return pairs[TEST:], pairs[:TEST]


def main() -> None:
    train, test = split()
    out = HERE / "data"
    out.mkdir(exist_ok=True)
    for name, part in (("train", train), ("test", test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for a, b in part:
                f.write(json.dumps({"prompt": f"add {a} {b}", "answer": str(a + b)}) + "\n")
    system, tools = agent_prompt_and_tools()
    rng = random.Random(1)
    with open(out / "demos.jsonl", "w") as f:
        for a, b in train[:DEMOS]:
            use_tool = rng.random() < TOOL_SHARE
            answer = a + b if use_tool else a  # never right without the tool: b >= 10
            f.write(json.dumps(demo(a, b, answer, use_tool, system, tools)) + "\n")


if __name__ == "__main__":
    main()
