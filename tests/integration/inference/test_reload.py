"""Weight reload on a real server: outputs change, versions advance, reload is
atomic under concurrent requests, and bad snapshots are refused."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import torch
from transformers import AutoModelForCausalLM

from backends.inference.adapters import make_reload_adapter
from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import Generation, InferenceClient
from tests.integration.inference._helpers import SERVED_NAME

PROMPT = [40, 41, 42, 43]
STEPS = 12


def _version(server: EmbeddedServer) -> int:
    return int(httpx.get(f"{server.base_url}/health").json()["policy_version"])


def _reload(server: EmbeddedServer, path: Path | str, version: int) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/update_weights_from_disk",
        json={"model_path": str(path), "version": version},
        timeout=120,
    )


async def _greedy(client: InferenceClient, steps: int = STEPS) -> Generation:
    (g,) = await client.complete(PROMPT, max_tokens=steps, temperature=0, ignore_eos=True)
    return g


def _greedy_sync(server: EmbeddedServer) -> Generation:
    async def run() -> Generation:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c:
            return await _greedy(c)

    return asyncio.run(run())


def _local_greedy(model_dir: Path, steps: int = STEPS) -> list[int]:
    """Greedy ``steps`` tokens in this process (full forward each step, eos ignored)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = list(PROMPT)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(PROMPT) :]


def test_reload_changes_outputs_and_advances_the_version(
    server: EmbeddedServer, snapshots: dict[str, Path]
) -> None:
    v = _version(server)
    before = _greedy_sync(server)
    assert before.policy_version == v
    with make_reload_adapter("embedded", server.base_url, timeout_s=120) as adapter:
        (outcome,) = adapter.reload(str(snapshots["b"]), v + 1)
    assert outcome.ok
    after = _greedy_sync(server)
    assert after.policy_version == v + 1
    assert after.token_ids != before.token_ids
    assert after.token_ids == _local_greedy(snapshots["b"])
    resp = _reload(server, snapshots["a"], v + 2)  # and back: same output as before
    assert resp.status_code == 200 and resp.headers["x-policy-version"] == str(v + 2)
    assert resp.json()["success"] is True and resp.json()["policy_version"] == v + 2
    assert _greedy_sync(server).token_ids == before.token_ids


def _broken_snapshots(root: Path, good: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {}
    for name in ("no_config", "no_weights", "half_written"):
        d = root / name
        shutil.copytree(good, d)
        cases[name] = d
    (cases["no_config"] / "config.json").unlink()
    (cases["no_weights"] / "model.safetensors").unlink()
    weights = cases["half_written"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    cases["missing_dir"] = root / "not_there"
    return cases


def test_bad_snapshot_is_rejected_and_old_weights_keep_serving(
    server: EmbeddedServer, snapshots: dict[str, Path], tmp_path: Path
) -> None:
    v = _version(server)
    before = _greedy_sync(server)
    for name, path in _broken_snapshots(tmp_path, snapshots["b"]).items():
        resp = _reload(server, path, v + 1)
        assert resp.status_code == 400, name
        body = resp.json()
        assert body["success"] is False and body["error"]["param"] == "model_path", name
        assert str(path) in body["error"]["message"], name
        now = _greedy_sync(server)
        assert (now.policy_version, now.token_ids) == (v, before.token_ids), name
    stale = _reload(server, snapshots["b"], v - 1 if v > 0 else -1)
    assert stale.status_code in (400, 409) and "error" in stale.json()
    assert _version(server) == v


def test_requests_racing_a_reload_each_see_one_version(
    server: EmbeddedServer, snapshots: dict[str, Path]
) -> None:
    v = _version(server) + 1
    assert _reload(server, snapshots["a"], v).status_code == 200
    expected = {v: _greedy_sync(server).token_ids, v + 1: _local_greedy(snapshots["b"])}
    assert expected[v] != expected[v + 1]
    seen: list[tuple[float, Generation]] = []
    reload_done = asyncio.Event()

    async def worker(client: InferenceClient) -> None:
        stop_at: float | None = None
        while stop_at is None or time.monotonic() < stop_at:
            sent = time.monotonic()
            seen.append((sent, await _greedy(client)))
            if reload_done.is_set() and stop_at is None:
                stop_at = time.monotonic() + 0.5

    async def reloader() -> float:
        await asyncio.sleep(0.4)
        async with httpx.AsyncClient(timeout=120) as http:
            resp = await http.post(
                f"{server.base_url}/update_weights_from_disk",
                json={"model_path": str(snapshots["b"]), "version": v + 1},
            )
        assert resp.status_code == 200, resp.text
        reload_done.set()
        return time.monotonic()

    async def race() -> float:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=120) as client:
            results: list[Any] = await asyncio.gather(
                reloader(), *(worker(client) for _ in range(4))
            )
            return float(results[0])

    done_at = asyncio.run(race())
    versions = [g.policy_version for _, g in seen]
    assert set(versions) == {v, v + 1}, versions
    for sent, g in seen:
        assert g.policy_version is not None
        assert g.token_ids == expected[g.policy_version]  # never a mix of weights
        if sent > done_at:
            assert g.policy_version == v + 1  # sent after the reload returned
    assert _version(server) == v + 1


def test_reloads_back_to_back_under_requests_never_mix_weights(
    server: EmbeddedServer, snapshots: dict[str, Path], tiny_model: Callable[..., Path]
) -> None:
    # A reload loads into the model the served one replaced (a spare) when no batch
    # runs on it: with reloads following each other while requests keep batches
    # running, a batch that still ran on the spare must never see its weights change.
    # Three sets of weights in turn (a spare is two reloads old: with two, it would be
    # reloaded with the weights it has); long answers, so a batch spans reloads.
    v0, steps = _version(server) + 1, 48
    paths = {**snapshots, "c": tiny_model(seed=3)}
    assert _reload(server, paths["a"], v0).status_code == 200
    outputs = {name: _local_greedy(paths[name], steps) for name in "abc"}
    assert len({tuple(o) for o in outputs.values()}) == 3
    which = {v0 + k: "abc"[k % 3] for k in range(10)}  # v0: a, v0+1: b, v0+2: c, ...
    seen: list[Generation] = []
    done = asyncio.Event()

    async def worker(client: InferenceClient) -> None:
        while not done.is_set():
            seen.append(await _greedy(client, steps))

    async def reloader() -> None:
        async with httpx.AsyncClient(timeout=120) as http:
            for version in range(v0 + 1, v0 + 10):
                await asyncio.sleep(0.15)
                path = paths[which[version]]
                resp = await http.post(
                    f"{server.base_url}/update_weights_from_disk",
                    json={"model_path": str(path), "version": version},
                )
                assert resp.status_code == 200, resp.text
        await asyncio.sleep(0.2)
        done.set()

    async def race() -> None:
        async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=120) as client:
            await asyncio.gather(reloader(), *(worker(client) for _ in range(4)))

    asyncio.run(race())
    assert len({g.policy_version for g in seen}) > 2
    for g in seen:
        assert g.policy_version is not None
        assert g.token_ids == outputs[which[g.policy_version]], g.policy_version
    assert _version(server) == v0 + 9


def test_sglang_style_version_field(server: EmbeddedServer, snapshots: dict[str, Path]) -> None:
    v = _version(server) + 1
    resp = httpx.post(
        f"{server.base_url}/update_weights_from_disk",
        json={"model_path": str(snapshots["a"]), "weight_version": str(v)},
        timeout=120,
    )
    assert resp.status_code == 200 and resp.json()["policy_version"] == v
