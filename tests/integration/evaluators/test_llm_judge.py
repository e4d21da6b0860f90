"""llm_judge with the real openai client against real HTTP servers on 127.0.0.1:

* a stand-in judge (a small FastAPI app under uvicorn, named so here: it is not a
  model) whose replies the test chooses by the model name: a score, garbage, a
  reply slower than the timeout, an HTTP 500;
* the run's own inference service (the embedded server on the bigram model that
  answers every chat turn with 'Score: 7'), the default endpoint.

A judge that fails scores 0, counts a failure and raises nothing: the run goes on.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from nexrl.core.types.episode import BaseEvaluationTarget
from nexrl.rollout.evaluators import EvaluatorContext, build
from tests.integration.inference._helpers import SERVED_NAME

ROW = {"prompt": "What is 6 * 7?", "answer": "42"}
ANSWER = BaseEvaluationTarget(final_answer="It is 42.")


def stand_in_judge() -> tuple[FastAPI, list[dict[str, Any]]]:
    app = FastAPI()
    seen: list[dict[str, Any]] = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> Any:
        seen.append(body)
        model = body["model"]
        if model == "slow":
            import asyncio

            await asyncio.sleep(3)
        if model == "broken":
            from fastapi.responses import JSONResponse

            return JSONResponse({"error": {"message": "judge crashed"}}, status_code=500)
        content = {"good": "Reasoning... Score: 8", "garbage": "I would rather not say."}.get(
            model, "Score: 1"
        )
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56},
        }

    return app, seen


@pytest.fixture(scope="module")
def judge() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    app, seen = stand_in_judge()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    thread.join()


def evaluate(url: str, model: str, **options: Any):
    ev = build("llm_judge", {"base_url": url, "model": model, **options})
    return ev.evaluate(ROW, ANSWER)


def test_a_judges_score_becomes_the_reward_and_its_cost_is_counted(judge) -> None:
    url, seen = judge
    result = evaluate(url, "good")
    assert result.reward == 0.8  # 8 / max_score 10
    assert result.metrics == {
        "judge_calls": 1.0,
        "judge_failures": 0.0,
        "judge_prompt_tokens": 50.0,
        "judge_completion_tokens": 6.0,
    }
    prompt = seen[-1]["messages"][0]["content"]
    assert "What is 6 * 7?" in prompt and "It is 42." in prompt and "42\n" in prompt


def test_a_custom_template_and_score_scale(judge) -> None:
    url, seen = judge
    result = evaluate(url, "good", prompt="Q={question} A={answer}", max_score=16.0)
    assert result.reward == 0.5
    assert seen[-1]["messages"][0]["content"] == "Q=What is 6 * 7? A=It is 42."


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("garbage", {}),  # no score in the reply
        ("slow", {"timeout_s": 0.5, "max_retries": 1}),  # times out twice
        ("broken", {"max_retries": 0}),  # HTTP 500
    ],
)
def test_a_failing_judge_scores_zero_and_counts_a_failure(judge, model, options) -> None:
    url, _ = judge
    result = evaluate(url, model, **options)
    assert (result.reward, result.metrics["judge_failures"]) == (0.0, 1.0)


def test_an_unreachable_judge_scores_zero() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening
    result = evaluate(url, "good", max_retries=0, timeout_s=2.0)
    sock.close()
    assert (result.reward, result.metrics["judge_failures"]) == (0.0, 1.0)


@pytest.fixture(scope="module")
def bigram_reply() -> str:
    return "Score: 7"


def test_the_default_endpoint_is_the_runs_inference_service(bigram_server) -> None:
    context = EvaluatorContext((bigram_server.base_url,), SERVED_NAME, "EMPTY")
    ev = build("llm_judge", {"max_tokens": 8}, context)
    result = ev.evaluate(ROW, ANSWER)
    assert result.reward == 0.7
    assert result.metrics["judge_failures"] == 0.0
    assert result.metrics["judge_completion_tokens"] > 0
