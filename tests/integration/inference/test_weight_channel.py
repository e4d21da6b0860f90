"""The weight handoff in memory on a real embedded server (CPU, ``shm``): weights copied
from the trainer's buffer serve exactly what a file reload of the same weights serves
(tokens and log-probs), the descriptor goes in full once, and what a file reload
refuses (NaN, stale versions, a buffer holding another version) is refused too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file

from backends.inference.adapters import EmbeddedReloadAdapter
from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import Generation, InferenceClient
from nexrl.core.weights.handoff import WeightChannel
from nexrl.core.weights.handoff.layout import write_stamp
from tests.integration.inference._helpers import SERVED_NAME

PROMPT = [40, 41, 42, 43]


@pytest.fixture(scope="module")
def channel() -> Iterator[WeightChannel]:
    ch = WeightChannel("shm", torch.device("cpu"))
    yield ch
    ch.close()


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def _post(server: EmbeddedServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=120)


def _sample(server: EmbeddedServer) -> Generation:
    async def run() -> Generation:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c:
            (g,) = await c.complete(
                PROMPT, max_tokens=10, temperature=1.0, seed=7, ignore_eos=True, logprobs=0
            )
            return g

    return asyncio.run(run())


def test_channel_weights_serve_what_a_file_reload_serves(
    start_embedded_server: Callable[..., EmbeddedServer],
    snapshots: dict[str, Path],
    channel: WeightChannel,
) -> None:
    server = start_embedded_server(snapshots["a"])
    desc = channel.write(_weights(snapshots["b"]), 5)
    resp = _post(server, "/update_weights_from_channel", {"channel": desc, "version": 5})
    assert resp.status_code == 200, resp.text
    assert resp.json()["policy_version"] == 5 and resp.headers["x-policy-version"] == "5"
    from_memory = _sample(server)
    assert from_memory.policy_version == 5
    resp = _post(
        server, "/update_weights_from_disk", {"model_path": str(snapshots["b"]), "version": 6}
    )
    assert resp.status_code == 200, resp.text
    from_file = _sample(server)
    assert from_file.policy_version == 6
    assert from_memory.token_ids == from_file.token_ids
    assert from_memory.logprobs == from_file.logprobs

    # the next version through the adapter: the id alone (the server keeps the mapping)
    channel.write(_weights(snapshots["a"]), 7)
    adapter = EmbeddedReloadAdapter(server.base_url, timeout_s=60)
    with adapter:
        adapter._opened.add((server.base_url, desc["id"]))  # as after a first handoff
        sent: list[dict[str, Any]] = []
        adapter._client.event_hooks["request"] = [lambda req: sent.append(json.loads(req.content))]
        (outcome,) = adapter.reload_from_channel(channel.descriptor(), 7)
    assert outcome.ok and sent[0]["channel"] == {"id": desc["id"]}
    resp = _post(
        server, "/update_weights_from_disk", {"model_path": str(snapshots["a"]), "version": 8}
    )
    file_a = _sample(server)
    channel.write(_weights(snapshots["a"]), 9)
    assert (
        _post(
            server, "/update_weights_from_channel", {"channel": {"id": desc["id"]}, "version": 9}
        ).status_code
        == 200
    )
    memory_a = _sample(server)
    assert (memory_a.token_ids, memory_a.logprobs) == (file_a.token_ids, file_a.logprobs)
    assert memory_a.token_ids != from_memory.token_ids


def test_the_server_refuses_what_a_file_reload_would(
    start_embedded_server: Callable[..., EmbeddedServer],
    snapshots: dict[str, Path],
    channel: WeightChannel,
) -> None:
    server = start_embedded_server(snapshots["a"])
    before = _sample(server)

    def version() -> int:
        return int(httpx.get(f"{server.base_url}/health").json()["policy_version"])

    def send(body: dict[str, Any]) -> httpx.Response:
        return _post(server, "/update_weights_from_channel", body)

    weights = _weights(snapshots["b"])
    bad = dict(weights)
    name = next(k for k, v in bad.items() if v.is_floating_point())
    bad[name] = bad[name].clone()
    bad[name].view(-1)[0] = float("nan")
    desc = channel.write(bad, 3)
    resp = send({"channel": desc, "version": 3})
    assert resp.status_code == 400 and "NaN" in resp.json()["error"]["message"]
    assert version() == 0

    desc = channel.write(weights, 4)
    resp = send({"channel": desc, "version": 5})  # the buffer holds 4
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "channel_moved"
    assert channel.buffer is not None
    write_stamp(channel.buffer, -1)  # the trainer writing it
    resp = send({"channel": {"id": desc["id"]}, "version": 4})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "channel_moved"
    write_stamp(channel.buffer, 4)
    assert send({"channel": {"id": "nope"}, "version": 4}).json()["error"]["code"] == (
        "channel_unknown"
    )
    elsewhere = {**desc, "id": "other", "path": "/etc/passwd"}
    resp = send({"channel": elsewhere, "version": 4})
    assert resp.status_code == 400 and "not a handoff buffer" in resp.json()["error"]["message"]
    assert version() == 0 and _sample(server).token_ids == before.token_ids

    assert send({"channel": {"id": desc["id"]}, "version": 4}).status_code == 200
    assert version() == 4
    resp = send({"channel": {"id": desc["id"]}, "version": 2})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "stale_version"
    where = httpx.get(f"{server.base_url}/weight_channel").json()
    assert where["device_uuid"] is None and "shm" in where["transports"]
