"""An agent function (plain ``openai`` client, two model calls an episode, as the
openai_agent recipe's) that raises on one task for its first seconds: the first prompt
it is given (chosen across every process of the run by files in ``NEXRL_TEST_FAIL_DIR``)
fails for ``NEXRL_TEST_FAIL_S`` seconds, long enough for the group's tries inside its
rollout task to run out. Keep this module free of nexrl imports."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import openai


def _chosen(folder: Path, prompt: str) -> tuple[str, float]:
    chosen = folder / "chosen"
    try:
        os.close(os.open(folder / "chosen.lock", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        deadline = time.monotonic() + 10
        while not chosen.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        tmp = folder / "chosen.tmp"
        tmp.write_text(f"{time.time()}\n{prompt}")
        os.replace(tmp, chosen)
    at, text = chosen.read_text().split("\n", 1)
    return text, float(at)


def run(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    prompt, since = _chosen(Path(os.environ["NEXRL_TEST_FAIL_DIR"]), task["prompt"])
    if task["prompt"] == prompt and time.time() - since < float(os.environ["NEXRL_TEST_FAIL_S"]):
        raise RuntimeError("injected failure")
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": task["prompt"]},
    ]
    final = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
    return final.choices[0].message.content or ""
