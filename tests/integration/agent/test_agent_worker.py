"""Config-defined tool-calling agents against a real embedded server (known weights)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from nexrl.rollout.worker.agent import AgentRolloutWorker, load_agent_config
from nexrl.rollout_worker import EvaluationRunResult, Evaluator
from tests.integration.inference._helpers import SERVED_NAME

CALL = '<tool_call>{"name": "f"}</tool_call>'
ITEM = {"group_id": 3, "run_id": 1, "data_item": {"prompt": "max 1 2 3", "answer": "3"}}

HANGS = 40  # more hung tool calls than a shared pool of threads held (32)
TOOLS_PY = """
import time
from pathlib import Path
CALLS = []
HUNG = []
def hangs_first():
    if len(HUNG) < @HANGS@:  # the first calls hang until the test releases them
        HUNG.append(1)
        deadline = time.monotonic() + 60
        while not Path(__file__).with_name("release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return "late"
    return "answered"
def f():
    CALLS.append(1)
    return {"calls": len(CALLS)}
def boom():
    raise RuntimeError("boom")
def slow():
    time.sleep(30)
    return "late"
def not_json():
    return {1, 2}
""".replace("@HANGS@", str(HANGS))


class Recorder(Evaluator):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def evaluate(self, data: dict[str, Any], evaluation_target: Any) -> EvaluationRunResult:
        self.seen.append(evaluation_target)
        return EvaluationRunResult(reward=0.5)


@pytest.fixture(scope="module")
def bigram_reply() -> str:
    """``bigram_server`` answers every turn with a call of tool ``f``."""
    return CALL


def agent_yaml(tmp_path: Path, tool: str = "f", **settings: Any) -> Path:
    (tmp_path / "custom_tools.py").write_text(TOOLS_PY)
    lines = [
        "name: test_agent",
        "system_prompt: [You can call tools., Answer briefly.]",
        f"max_turns: {settings.get('max_turns', 3)}",
        f"max_context_tokens: {settings.get('max_context_tokens', 4096)}",
        f"tool_timeout_s: {settings.get('tool_timeout_s', 5)}",
        "llm_config: {temperature: 0, max_tokens: 16}",
        "tools:",
        "  - name: f",
        "    description: a tool",
        f"    binding: custom_tools:{tool}",
        "    parameters: {type: object, properties: {}}",
    ]
    path = tmp_path / "agent_config.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(server: EmbeddedServer, config: Path, mode: str = "per_call") -> tuple[Any, list[Any]]:
    evaluator = Recorder()

    async def go() -> Any:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as client:
            worker = AgentRolloutWorker(
                client, evaluator, {}, agent=load_agent_config(config), trajectory_mode=mode
            )
            episode = await worker.run_agent(ITEM)
            return episode, worker

    episode, worker = asyncio.run(go())
    return episode, worker.score(episode)


def test_multi_turn_episode_runs_each_tool_call_and_keeps_every_model_call(
    bigram_server: EmbeddedServer, tmp_path: Path
) -> None:
    episode, trajectories = run(bigram_server, agent_yaml(tmp_path))
    assert len(episode.calls) == 3 and episode.infos[-1]["finish"] == "max_turns"
    tool_msgs = [m for m in episode.target.observation if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ['{"calls": 1}', '{"calls": 2}', '{"calls": 3}']
    assert episode.target.observation[0] == {
        "role": "system",
        "content": "You can call tools.\nAnswer briefly.",
    }
    # token in, token out: each trajectory is exactly what the server sampled
    assert len(trajectories) == 3
    for traj, gen in zip(trajectories, episode.calls, strict=True):
        assert traj.prompt_ids == gen.prompt_token_ids and traj.response_ids == gen.token_ids
        assert (traj.group_id, traj.run_id, traj.reward) == (3, 1, 0.5)
    # each call sees the previous calls and tool results: its prompt is longer
    lengths = [len(g.prompt_token_ids) for g in episode.calls]
    assert lengths == sorted(lengths) and len(set(lengths)) == 3
    # the trace: model call, tool call, ... in order, with the tokens the server counted
    kinds = [s["kind"] for s in episode.trace]
    assert kinds == ["llm", "tool"] * 3, kinds
    llm = [s for s in episode.trace if s["kind"] == "llm"]
    for span, gen in zip(llm, episode.calls, strict=True):
        assert span["prompt_tokens"] == len(gen.prompt_token_ids)
        assert span["completion_tokens"] == len(gen.token_ids)
        assert span["tool_calls"] == len(gen.tool_calls) and span["error"] is None
    tools = [s for s in episode.trace if s["kind"] == "tool"]
    assert [(s["name"], s["result"], s["error"]) for s in tools] == [
        ("f", '{"calls": 1}', None),
        ("f", '{"calls": 2}', None),
        ("f", '{"calls": 3}', None),
    ]
    starts = [s["start_s"] for s in episode.trace]
    assert starts == sorted(starts) and all(s["duration_s"] >= 0 for s in episode.trace)


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("boom", "error: f raised RuntimeError: boom"),
        ("slow", "error: tool f did not answer"),
        # once a TypeError out of json.dumps that failed the group, naming no tool
        ("not_json", "error: f returned set, which is not JSON"),
    ],
)
def test_a_tool_that_raises_or_hangs_answers_with_an_error(
    bigram_server: EmbeddedServer, tmp_path: Path, tool: str, expected: str
) -> None:
    start = time.monotonic()
    episode, _ = run(bigram_server, agent_yaml(tmp_path, tool, max_turns=1, tool_timeout_s=1))
    (tool_msg,) = [m for m in episode.target.observation if m["role"] == "tool"]
    assert tool_msg["content"].startswith(expected)
    assert time.monotonic() - start < 25  # the hung tool did not hold the episode
    # the failure is in the episode's trace, not only in a log line
    (span,) = [s for s in episode.trace if s["kind"] == "tool"]
    assert span["name"] == "f" and span["error"].startswith(expected), span


def test_hung_tool_calls_never_starve_later_calls(
    bigram_server: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Each call has a thread of its own: with a shared pool, once the pool was full of hung
    # calls, every later call of every episode queued behind them and timed out unrun (the
    # run went on with reward 0 and nothing said why).
    config = agent_yaml(tmp_path, "hangs_first", max_turns=1, tool_timeout_s=1)
    caplog.set_level(logging.INFO, logger="nexrl.rollout.worker.agent.worker")

    async def go() -> tuple[list[Any], Any]:
        async with InferenceClient(bigram_server.base_url, SERVED_NAME, timeout_s=60) as client:
            worker = AgentRolloutWorker(client, Recorder(), {}, agent=load_agent_config(config))
            hung = await asyncio.gather(
                *(worker.run_agent({**ITEM, "run_id": r}) for r in range(HANGS))
            )
            return hung, await worker.run_agent(ITEM)

    try:
        hung, later = asyncio.run(go())
    finally:
        (tmp_path / "release").write_text("")
    for episode in hung:
        (tool_msg,) = [m for m in episode.target.observation if m["role"] == "tool"]
        assert tool_msg["content"] == "error: tool f did not answer within 1s"
    (tool_msg,) = [m for m in later.target.observation if m["role"] == "tool"]
    assert tool_msg["content"] == "answered"
    said = [r.getMessage() for r in caplog.records]
    assert "tool f did not answer within 1s (tool_timeout_s)" in said[0]


def test_context_limit_ends_the_episode(bigram_server: EmbeddedServer, tmp_path: Path) -> None:
    episode, _ = run(bigram_server, agent_yaml(tmp_path, max_context_tokens=60))
    assert len(episode.calls) == 1 and episode.infos[-1]["finish"] == "context_limit"


def test_episode_mode_refuses_re_rendered_turns(
    bigram_server: EmbeddedServer, tmp_path: Path
) -> None:
    # The template re-renders the sampled call with "arguments": {} added, so call 2's
    # prompt does not extend call 1's tokens: an error, never a silent re-tokenization.
    with pytest.raises(ValueError, match="does not extend"):
        run(bigram_server, agent_yaml(tmp_path, max_turns=2), mode="episode")
