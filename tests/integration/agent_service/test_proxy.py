"""The agent service in front of a real embedded server, driven by a plain-openai agent."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import torch

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import Generation, InferenceClient
from nexrl.rollout.agent_service import AgentServiceError, report_reward
from nexrl.rollout.agent_service.rewards import stable_id
from nexrl.trainer.algorithms.advantages import grpo, token_level_from_scalar
from tests.integration.agent_service._plain_agent import conversation, run_agent
from tests.integration.agent_service._pool import read_pool
from tests.integration.agent_service.conftest import ServiceFactory
from tests.integration.inference._helpers import BIGRAM_REPLY, SERVED_NAME

TASK = "What is the largest of 3 7 5?"


def direct_calls(
    embedded_server: EmbeddedServer, replies: list[str], seed: int | None = None
) -> list[Generation]:
    """The agent's calls sent straight to the inference server (same messages and seeds)."""

    async def go() -> list[Generation]:
        async with InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=120) as client:
            out = []
            for k in range(len(replies)):
                extra: dict[str, Any] = {} if seed is None else {"seed": seed + k}
                (gen,) = await client.chat(conversation(TASK, replies[:k]), max_tokens=12, **extra)
                out.append(gen)
            return out

    return asyncio.run(go())


def f32(values: list[float]) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float32)]


def test_recorded_tokens_are_what_the_server_sampled(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    replies = run_agent(service.openai_base_url, "episode-1", SERVED_NAME, TASK, seed=100)
    out = report_reward(service.base_url, "episode-1", 1.0, "task-1", trajectory_mode="per_call")
    assert out["trajectories"] == out["model_calls"] == 3 and out["trajectory_mode"] == "per_call"

    trajectories = read_pool(service.config.pool)
    direct = direct_calls(embedded_server, replies, seed=100)
    assert [g.text for g in direct] == replies  # the agent got the server's replies
    assert len(trajectories) == 3
    for traj, gen in zip(trajectories, direct, strict=True):
        # token in, token out: the same ids and log-probs as a direct call with the same seed
        assert traj.prompt_ids == gen.prompt_token_ids
        assert traj.response_ids == gen.token_ids
        assert gen.logprobs is not None and traj.logprobs == f32(gen.logprobs)
        assert traj.loss_mask == [1] * len(gen.token_ids)
        assert traj.reward == 1.0 and traj.policy_version == 0
        assert traj.group_id == out["group_id"] == stable_id("group:task-1", 2**63)
        assert traj.run_id == out["run_id"] == stable_id("episode-1", 2**31)
        assert traj.extra_info["session"] == "episode-1"
        assert traj.extra_info["group"] == "task-1"
        assert traj.extra_info["finish_reason"] == gen.finish_reason


def test_the_agent_gets_a_plain_openai_reply(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    client = openai.OpenAI(base_url=service.openai_base_url, api_key="plain", max_retries=0)
    reply = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    extra = reply.model_extra or {}
    assert "prompt_token_ids" not in extra and reply.choices[0].logprobs is None
    assert "token_ids" not in (reply.choices[0].model_extra or {})
    # what the agent asks for itself it does get
    with_lp = client.chat.completions.create(
        model=SERVED_NAME,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        logprobs=True,
    )
    assert with_lp.choices[0].logprobs is not None and with_lp.choices[0].logprobs.content
    completion = client.completions.create(model=SERVED_NAME, prompt="hi", max_tokens=3)
    assert completion.choices[0].logprobs is None and completion.choices[0].text is not None
    assert [m.id for m in client.models.list().data] == [SERVED_NAME]
    session = httpx.get(f"{service.base_url}/v1/sessions/plain", timeout=10).json()
    assert session["calls"] == 3 and session["state"] == "open"


def test_chained_calls_become_one_episode_with_tool_and_user_turns_masked(
    bigram_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(bigram_server.base_url)
    replies = run_agent(service.openai_base_url, "chained", SERVED_NAME, TASK)
    assert replies == [BIGRAM_REPLY] * 3
    out = report_reward(service.base_url, "chained", 0.5, 7, data_item={"task": TASK})
    assert (out["trajectory_mode"], out["trajectories"], out["model_calls"]) == ("episode", 1, 3)

    (traj,) = read_pool(service.config.pool)
    d = direct_calls(bigram_server, replies)
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    seen = d[0].prompt_token_ids
    for k, gen in enumerate(d):
        between = gen.prompt_token_ids[len(seen) :] if k else []
        assert gen.logprobs is not None and (k == 0 or len(between) > 0)
        response += between + gen.token_ids
        mask += [0] * len(between) + [1] * len(gen.token_ids)
        logprobs += [0.0] * len(between) + gen.logprobs
        seen = gen.prompt_token_ids + gen.token_ids
    assert traj.prompt_ids == d[0].prompt_token_ids
    assert traj.response_ids == response and traj.loss_mask == mask
    assert traj.logprobs == f32(logprobs)
    assert (traj.reward, traj.group_id) == (0.5, 7)
    assert traj.metrics["model_calls"] == 3.0 and traj.data_item == {"task": TASK}


def test_sessions_of_one_task_form_a_grpo_group_with_one_run_each(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    for sid, reward in (("try-a", 1.0), ("try-b", 0.0)):
        run_agent(service.openai_base_url, sid, SERVED_NAME, TASK, turns=2)
        report_reward(service.base_url, sid, reward, "task-g", trajectory_mode="per_call")

    trajectories = read_pool(service.config.pool)
    assert len(trajectories) == 4 and len({t.group_id for t in trajectories}) == 1
    runs: dict[str, set[int]] = {t.extra_info["session"]: set() for t in trajectories}
    for t in trajectories:
        runs[t.extra_info["session"]].add(t.run_id)
    assert all(len(r) == 1 for r in runs.values()) and runs["try-a"] != runs["try-b"]

    # the calls of one session share a run id: GRPO weighs sessions, not calls, and is finite
    width = max(len(t.response_ids) for t in trajectories)
    mask = torch.tensor(
        [[1.0] * len(t.response_ids) + [0.0] * (width - len(t.response_ids)) for t in trajectories]
    )
    rewards = token_level_from_scalar(torch.tensor([t.reward for t in trajectories]), mask)
    adv, _ = grpo(
        rewards,
        mask,
        torch.tensor([t.group_id for t in trajectories]),
        torch.tensor([t.run_id for t in trajectories]),
    )
    assert torch.isfinite(adv).all()
    for t, row in zip(trajectories, adv, strict=True):
        sign = 1.0 if t.reward == 1.0 else -1.0
        valid = row[: len(t.response_ids)]
        assert torch.all(valid * sign > 0)


def test_train_calls_masks_whole_calls_and_a_bad_report_keeps_the_session(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    run_agent(service.openai_base_url, "partial", SERVED_NAME, TASK, turns=2)
    with pytest.raises(AgentServiceError, match="train_calls: 3 flag") as bad:
        report_reward(service.base_url, "partial", 1.0, 1, train_calls=[True, False, True])
    assert bad.value.status_code == 422
    assert read_pool(service.config.pool) == []
    out = report_reward(
        service.base_url, "partial", 1.0, 1, train_calls=[False, True], trajectory_mode="per_call"
    )
    assert out["trajectories"] == 2
    first, second = read_pool(service.config.pool)
    assert set(first.loss_mask) == {0} and set(second.loss_mask) == {1}
