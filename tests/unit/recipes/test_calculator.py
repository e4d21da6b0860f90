"""The calculator recipe: data, demonstrations, evaluator, and the tiny tokenizer's view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexrl.core.plugins import load_object
from nexrl.driver.modeling import build_tokenizer
from nexrl.driver.recipe import load_recipe_checked
from nexrl.rollout.worker.agent import load_agent_config
from nexrl.rollout_worker import BaseEvaluationTarget

RECIPE = "recipes/calculator/calculator_agent_tiny.yaml"
HERE = Path("recipes/calculator")


def rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (HERE / "data" / f"{name}.jsonl").read_text().splitlines()]


def test_shipped_prompts_are_two_digit_sums_held_out() -> None:
    train, test = rows("train"), rows("test")
    assert (len(train), len(test)) == (7900, 200)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for r in [*train, *test]:
        word, a, b = r["prompt"].split()
        assert word == "add" and 10 <= int(a) <= 99 and 10 <= int(b) <= 99
        assert r["answer"] == str(int(a) + int(b))


def test_demos_call_the_tool_half_of_the_time_and_are_right_only_when_they_do() -> None:
    agent = load_agent_config(HERE / "agent_config.yaml")
    demos = rows("demos")
    train = {r["prompt"] for r in rows("train")}
    assert len(demos) == 4000
    with_tool = 0
    for d in demos:
        m = d["messages"]
        assert d["tools"] == [t.openai() for t in agent.tools]
        assert m[0] == {"role": "system", "content": agent.system_prompt}
        assert m[1]["content"] in train  # no test prompt is demonstrated
        _, a, b = m[1]["content"].split()
        assert m[-1]["role"] == "assistant"
        answer = int(m[-1]["content"])
        if len(m) == 5:  # call the tool with the prompt's numbers, copy its result
            with_tool += 1
            (call,) = m[2]["tool_calls"]
            assert call["function"]["name"] == "calculator"
            assert json.loads(call["function"]["arguments"]) == {"a": int(a), "b": int(b)}
            assert m[3] == {"role": "tool", "content": str(int(a) + int(b))}
            assert answer == int(a) + int(b)
        else:  # without the tool the demonstrations answer wrongly: the first number
            assert len(m) == 3
            assert answer == int(a) != int(a) + int(b)
    assert with_tool == 1973  # make_data.py: TOOL_SHARE 0.5 of 4000, seeded


def test_the_tiny_tokenizer_sees_a_short_prompt_and_an_eight_token_tool_call() -> None:
    tiny = load_recipe_checked(RECIPE).cfg.model.tiny
    tok: Any = build_tokenizer(list(tiny.vocab), added_tokens=list(tiny.added_tokens))
    demo = next(d for d in rows("demos") if len(d["messages"]) == 5)
    prompt = tok.apply_chat_template(
        demo["messages"][:2], tools=demo["tools"], add_generation_prompt=True, return_dict=False
    )
    # the tools block of agent_config.yaml is one added token (or the yaml drifted)
    block = int(tok.convert_tokens_to_ids(tiny.added_tokens[0]))
    assert block in prompt and len(prompt) <= 32
    upto_call = tok.apply_chat_template(
        demo["messages"][:3], tools=demo["tools"], return_dict=False
    )
    # <tool_call>{..."a": | d d | , "b": | d d | }}</tool_call> | <|im_end|> (+ "\n")
    assert len(upto_call) - len(prompt) == 9


def test_reward_is_for_the_right_sum_and_tool_use_is_measured() -> None:
    ev = load_object(str(HERE / "evaluator.py"), "SumEvaluator", [Path.cwd()], "test")()
    row = {"prompt": "add 53 98", "answer": "151"}
    trace = [{"role": "tool", "content": "151"}]
    right = ev.evaluate(row, BaseEvaluationTarget(final_answer="151", observation=trace))
    assert right.reward == 1.0 and right.metrics == {"used_tool": 1.0}
    guess = ev.evaluate(row, BaseEvaluationTarget(final_answer="141", observation=[]))
    assert guess.reward == 0.0 and guess.metrics == {"used_tool": 0.0}
    assert ev.evaluate(row, BaseEvaluationTarget(final_answer="")).reward == 0.0
