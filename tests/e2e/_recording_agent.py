"""The recipe's agent (recipes/openai_agent/agent.py: two plain openai chat calls),
also asking for the token ids and log-probs the service returns and appending what it
got to the file named by ``NEXRL_TEST_AGENT_LOG`` (one JSON line per episode, keyed by
its api_key). Keep this module free of nexrl imports."""

from __future__ import annotations

import json
import os
from typing import Any

from openai import OpenAI

TOKEN_IDS = {"return_token_ids": True}


def run(task: dict[str, Any], *, base_url: str, api_key: str, model: str) -> str:
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages: list[Any] = [{"role": "user", "content": task["prompt"]}]

    def ask(messages: list[Any]) -> Any:
        return client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=1,
            temperature=1.0,
            logprobs=True,
            extra_body=TOKEN_IDS,
        )

    first = ask(messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": task["prompt"]},
    ]
    final = ask(messages)
    line = json.dumps({"session": api_key, "replies": [first.model_dump(), final.model_dump()]})
    with open(os.environ["NEXRL_TEST_AGENT_LOG"], "a") as f:
        f.write(line + "\n")
    return final.choices[0].message.content or ""
