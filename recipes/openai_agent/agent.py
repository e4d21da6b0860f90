"""A max-digit agent written only against the openai client: nothing NexRL-specific.

It answers twice: a first attempt, then the same question again with that
attempt in view; the second reply is its final answer.
"""

from openai import OpenAI


def run(task: dict, *, base_url: str, api_key: str, model: str) -> str:
    client = OpenAI(base_url=base_url, api_key=api_key)
    messages = [{"role": "user", "content": task["prompt"]}]
    first = client.chat.completions.create(
        model=model, messages=messages, max_tokens=1, temperature=1.0
    )
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": task["prompt"]},
    ]
    final = client.chat.completions.create(
        model=model, messages=messages, max_tokens=1, temperature=1.0
    )
    return final.choices[0].message.content or ""
