"""Agents that build their own trajectories push them: validated, all or nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import Generation, InferenceClient
from nexrl.core.types import Trajectory
from nexrl.rollout.agent_service import AgentServiceError, push_trajectories
from tests.integration.agent_service._pool import read_pool
from tests.integration.agent_service.conftest import ServiceFactory
from tests.integration.inference._helpers import MESSAGES, SERVED_NAME


def sampled(embedded_server: EmbeddedServer, n: int) -> list[Generation]:
    async def go() -> list[Generation]:
        async with InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=120) as client:
            return await client.chat(MESSAGES, n=n, max_tokens=6, seed=5)

    return asyncio.run(go())


def record(gen: Generation, run_id: int, **override: Any) -> dict[str, Any]:
    assert gen.logprobs is not None
    rec = {
        "prompt_ids": gen.prompt_token_ids,
        "response_ids": gen.token_ids,
        "loss_mask": [1] * len(gen.token_ids),
        "logprobs": gen.logprobs,
        "reward": float(run_id),
        "group_id": "my-task",
        "run_id": run_id,
        "metrics": {"turns": 1},
        "extra_info": {"agent": "mine"},
    }
    rec.update(override)
    return rec


def test_pushed_trajectories_land_in_the_pool_in_one_commit(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    gens = sampled(embedded_server, 2)
    objects = [
        Trajectory(
            prompt_ids=g.prompt_token_ids,
            response_ids=g.token_ids,
            loss_mask=[1] * len(g.token_ids),
            logprobs=list(g.logprobs or []),
            reward=0.25,
            group_id=11,
            run_id=i,
        )
        for i, g in enumerate(gens)
    ]
    out = push_trajectories(service.base_url, [record(g, i) for i, g in enumerate(gens)])
    assert out["written"] == 2 and len(out["group_ids"]) == 1
    assert push_trajectories(f"{service.base_url}/v1", objects) == {"written": 2, "group_ids": [11]}

    back = read_pool(service.config.pool)
    assert len(back) == 4
    for t, g in zip(back, gens + gens, strict=True):
        assert t.prompt_ids == g.prompt_token_ids and t.response_ids == g.token_ids
        assert t.logprobs == [float(x) for x in np.asarray(g.logprobs, dtype=np.float32)]
    assert [t.run_id for t in back] == [0, 1, 0, 1]
    assert back[0].group_id == back[1].group_id == out["group_ids"][0]
    assert back[0].extra_info == {"agent": "mine", "group": "my-task"}
    assert back[1].metrics == {"turns": 1.0} and back[2].reward == 0.25


def test_one_bad_record_rejects_the_request_and_names_index_and_field(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    service = make_service(embedded_server.base_url)
    g = sampled(embedded_server, 1)[0]
    records = [
        record(g, 0),
        record(g, 1, loss_mask=[1]),  # one flag for several tokens
        record(g, 2, rewrd=1.0),  # a typo
        record(g, 3, response_ids=["a"]),
    ]
    with pytest.raises(AgentServiceError) as exc:
        push_trajectories(service.base_url, records)
    assert exc.value.status_code == 422
    message = str(exc.value)
    assert "trajectories[1].loss_mask: has 1 entries for" in message
    assert "nothing was written" in message
    details = exc.value.body["error"]["details"]
    params = [d["param"] for d in details]
    assert params == [
        "trajectories[1].loss_mask",
        "trajectories[2].rewrd",
        "trajectories[3].response_ids.0",
    ]
    assert "remove it" in details[1]["message"] and "send an integer" in details[2]["message"]
    assert read_pool(service.config.pool) == []


@pytest.mark.parametrize(
    ("patch", "param", "message"),
    [
        ('"logprobs": [NaN]', "trajectories[0].logprobs", "not a finite log-probability"),
        ('"logprobs": [0.5]', "trajectories[0].logprobs", "not a finite log-probability"),
        ('"reward": true', "trajectories[0].reward", "send a number"),
        ('"reward": Infinity', "trajectories[0].reward", "finite"),
        ('"loss_mask": [2]', "trajectories[0].loss_mask", "0 (not trained) or 1"),
        ('"group_id": 1.5', "trajectories[0].group_id", "integer or a non-empty string"),
        ('"response_ids": []', "trajectories[0].response_ids", "at least one token"),
    ],
)
def test_bad_values_are_named(
    embedded_server: EmbeddedServer,
    make_service: ServiceFactory,
    patch: str,
    param: str,
    message: str,
) -> None:
    service = make_service(embedded_server.base_url)
    base = {
        "prompt_ids": [1, 2],
        "response_ids": [3],
        "loss_mask": [1],
        "logprobs": [-0.5],
        "reward": 1.0,
        "group_id": 1,
    }
    key = patch.split(":")[0].strip('"')
    text = json.dumps({k: v for k, v in base.items() if k != key})
    content = text[:-1] + ", " + patch + "}"
    resp = httpx.post(
        f"{service.base_url}/v1/trajectories",
        content=b'{"trajectories": [' + content.encode() + b"]}",
        headers={"content-type": "application/json"},
        timeout=30,
    )
    err = resp.json()["error"]
    assert resp.status_code == 422 and err["param"] == param and message in err["message"]
    assert read_pool(service.config.pool) == []


@pytest.mark.parametrize("body", [{}, {"trajectories": []}, {"trajectories": [1]}, [1]])
def test_a_malformed_push_body_is_refused(
    embedded_server: EmbeddedServer, make_service: ServiceFactory, body: Any
) -> None:
    service = make_service(embedded_server.base_url)
    resp = httpx.post(f"{service.base_url}/v1/trajectories", json=body, timeout=30)
    assert resp.status_code == 422 and "trajectories" in resp.json()["error"]["message"]
