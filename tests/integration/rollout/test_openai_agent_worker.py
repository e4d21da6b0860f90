"""The ``openai_agent`` rollout worker against a real embedded server: an agent function
that knows only the ``openai`` client runs inside the rollout future (``rollout_groups_task``,
as Dask runs it), through the process's recording agent service."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import parse_chat_completion
from nexrl.core.plugins import load_object
from nexrl.core.pool.config import PoolConfig
from nexrl.rollout.worker.base import Episode
from nexrl.rollout.worker.tasks import (
    GroupError,
    GroupSummary,
    RolloutSpec,
    _worker,
    evaluate_groups_task,
    rollout_groups_task,
)
from tests.integration.inference._helpers import SERVED_NAME

WORDS = ["max", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
AGENTS = "tests/integration/rollout/_openai_agents.py"
ROW = {"prompt": "max 4 3 9", "answer": "9"}


@pytest.fixture(scope="module")
def tiny_model_dir(tiny_model: Callable[..., Path]) -> Path:
    """``embedded_server``'s model: the max-digit words only."""
    return tiny_model(vocab=WORDS, seed=3)


def spec(embedded_server: EmbeddedServer, agent: str, **kw: Any) -> RolloutSpec:
    return RolloutSpec(
        worker_type="openai_agent",
        evaluator=("recipes/max_digit/evaluator.py", "MaxDigitEvaluator"),
        roots=(str(Path.cwd()),),
        base_urls=(embedded_server.base_url,),
        served_model_name=SERVED_NAME,
        sampling=(("temperature", 0.0),),  # not applied: the agent chooses its own
        pool=PoolConfig(store="unused"),
        timeout_s=60.0,
        agent_entrypoint=f"{AGENTS}:{agent}",
        **{"seed": 11, **kw},
    )


def items(group: int, runs: int = 2) -> list[dict[str, Any]]:
    return [{"group_id": group, "run_id": r, "data_item": dict(ROW)} for r in range(runs)]


def episodes(s: RolloutSpec, group: int, runs: int = 2) -> list[Episode]:
    """The rollout future's output for one group: an unscored episode per item."""
    (out,) = rollout_groups_task(s, [items(group, runs)])
    assert not isinstance(out, GroupError), out
    assert all(isinstance(ep, Episode) for ep in out)
    return [ep for ep in out if isinstance(ep, Episode)]


def seen() -> dict[str, list[dict[str, Any]]]:
    """What the agent functions got back (the module as the worker loaded it)."""
    agents = load_object(AGENTS, "SEEN", [Path.cwd()], "test")
    assert isinstance(agents, dict)
    return agents


@pytest.mark.parametrize("agent", ["two_calls", "two_calls_async"])
def test_episode_is_what_the_server_sampled_for_the_agent(
    embedded_server: EmbeddedServer, agent: str
) -> None:
    s = spec(embedded_server, agent)
    eps = episodes(s, group=5)
    assert len(eps) == 2
    sessions = set()
    for ep in eps:
        sid = ep.infos[0]["session"]
        sessions.add(sid)
        replies = [parse_chat_completion(body)[0] for body in seen()[sid]]
        # token in, token out: the recorded calls are the replies the agent got
        assert ep.calls == replies
        assert ep.target.final_answer == (replies[-1].text or "")
        assert ep.calls[1].prompt_token_ids[: len(ep.calls[0].prompt_token_ids)] == (
            ep.calls[0].prompt_token_ids
        )
        # the trace: the two model calls as the service timed and counted them
        assert [s["kind"] for s in ep.trace] == ["llm", "llm"]
        assert [(s["prompt_tokens"], s["completion_tokens"]) for s in ep.trace] == [
            (len(g.prompt_token_ids), len(g.token_ids)) for g in ep.calls
        ]
        assert ep.trace[0]["start_s"] == 0.0 <= ep.trace[1]["start_s"]
        assert all(s["duration_s"] > 0 for s in ep.trace)
    assert len(sessions) == 2  # a fresh session per episode

    trajectories = [t for ep in eps for t in _worker(s, None).score(ep)]
    assert len(trajectories) == 4  # per_call: one per model call
    assert [(t.group_id, t.run_id) for t in trajectories] == [(5, 0), (5, 0), (5, 1), (5, 1)]
    for t, gen in zip(trajectories, [g for ep in eps for g in ep.calls], strict=True):
        assert (t.prompt_ids, t.response_ids) == (gen.prompt_token_ids, gen.token_ids)
        assert t.logprobs == pytest.approx([min(0.0, x) for x in gen.logprobs or []])
        assert t.policy_version == gen.policy_version == 0

    (summary,) = evaluate_groups_task(s, [list(eps)], commit=False)
    assert isinstance(summary, GroupSummary)
    assert summary.rewards == [t.reward for t in trajectories]


def test_the_recipes_agent_runs_as_the_user_guide_shows(embedded_server: EmbeddedServer) -> None:
    s = replace(
        spec(embedded_server, "unused"), agent_entrypoint="recipes/openai_agent/agent.py:run"
    )
    for ep in episodes(s, group=4):
        first, final = ep.calls  # a first attempt, then the answer
        assert len(first.token_ids) == len(final.token_ids) == 1
        assert ep.target.final_answer == (final.text or "")


def test_episode_mode_merges_the_calls_of_an_episode(bigram_server: EmbeddedServer) -> None:
    # The bigram model says the same words after every prompt: its replies re-render
    # as sampled, so an episode's calls chain token for token.
    s = spec(bigram_server, "two_calls", agent_trajectory="episode")
    (ep,) = episodes(s, group=6, runs=1)
    (t,) = _worker(s, None).score(ep)
    first, second = ep.calls
    assert t.prompt_ids == first.prompt_token_ids
    between = second.prompt_token_ids[len(first.prompt_token_ids) + len(first.token_ids) :]
    assert t.response_ids == first.token_ids + between + second.token_ids
    assert t.loss_mask == [1] * len(first.token_ids) + [0] * len(between) + [1] * len(
        second.token_ids
    )
    assert t.metrics["model_calls"] == 2.0


def test_unseeded_calls_get_request_seeds_so_an_episode_replays(
    embedded_server: EmbeddedServer,
) -> None:
    s = spec(embedded_server, "two_calls")  # the agent sends no seed; the service adds one per call
    runs = [episodes(s, group=7, runs=3) for _ in range(2)]
    sampled = [[(g.prompt_token_ids, g.token_ids) for ep in run for g in ep.calls] for run in runs]
    assert sampled[0] == sampled[1]  # same (seed, group, run, call): the same tokens


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("raises", r"agent .*_openai_agents\.py:raises raised ValueError: the agent's own bug"),
        ("no_calls", r"agent .*:no_calls made no model call through the base_url"),
        ("returns_a_number", r"agent .*:returns_a_number returned int, not str"),
    ],
)
def test_a_failing_agent_fails_the_rollout_naming_the_function(
    embedded_server: EmbeddedServer, agent: str, message: str
) -> None:
    (failed,) = rollout_groups_task(spec(embedded_server, agent), [items(group=8)])
    assert isinstance(failed, GroupError) and failed.component == "rollout"
    assert re.match(f"AgentError: {message}", failed.error), failed.error


def test_an_agent_that_never_returns_times_out_naming_the_field(
    embedded_server: EmbeddedServer,
) -> None:
    s = spec(embedded_server, "never_returns", agent_timeout_s=0.2)
    (failed,) = rollout_groups_task(s, [items(group=9)])
    assert isinstance(failed, GroupError) and failed.component == "rollout"
    assert re.match(
        r"AgentError: .*never_returns did not return within 0\.2s "
        r"\(rollout_worker\.agent_timeout_s\)",
        failed.error,
    ), failed.error
