"""A multi-turn agent written only against the plain ``openai`` client.

It knows nothing about NexRL: it is given a ``base_url`` and an ``api_key``
like any OpenAI-compatible endpoint. Keep this module free of nexrl imports.
"""

from __future__ import annotations

from typing import Any

import openai

FOLLOW_UPS = ["Are you sure?", "Say it again.", "One more time."]


def conversation(task: str, replies: list[str]) -> list[dict[str, Any]]:
    """The messages the agent sends for its next call after ``replies``."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": task},
    ]
    for i, reply in enumerate(replies):
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": FOLLOW_UPS[i % len(FOLLOW_UPS)]})
    return messages


def run_agent(
    base_url: str, api_key: str, model: str, task: str, turns: int = 3, seed: int | None = None
) -> list[str]:
    """Ask ``task``, then follow up ``turns - 1`` times; returns the model's replies."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=120, max_retries=0)
    replies: list[str] = []
    for turn in range(turns):
        reply = client.chat.completions.create(
            model=model,
            messages=conversation(task, replies),  # type: ignore[arg-type]
            max_tokens=12,
            seed=None if seed is None else seed + turn,
        )
        replies.append(reply.choices[0].message.content or "")
    return replies
