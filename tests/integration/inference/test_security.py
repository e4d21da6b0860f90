"""The embedded server's security: a bearer token on every request, no bind beyond
loopback without one, and reloads only from under the run's snapshot root.

Real servers, reached with the real ``openai`` client and httpx."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from backends.inference.adapters import make_reload_adapter
from backends.inference.embedded import EmbeddedServer, ServerStartError
from nexrl.core.chat import Generation, InferenceClient
from nexrl.core.config.sections.runtime import InferenceServiceConfig
from nexrl.core.util.auth import INFERENCE_TOKEN_ENV
from nexrl.inference.spec import InferenceSpec
from nexrl.inference.supervisor import InferenceSupervisor
from tests.integration.inference._helpers import SERVED_NAME

TOKEN = "tok-3f9a1c"
PROMPT = [40, 41, 42, 43]


@pytest.fixture(scope="module")
def snapshot_root(tmp_path_factory: pytest.TempPathFactory, snapshots: dict[str, Path]) -> Path:
    """A run's snapshot root holding ``v1`` (a copy of snapshot ``b``)."""
    root = tmp_path_factory.mktemp("run") / "snapshots"
    root.mkdir()
    shutil.copytree(snapshots["b"], root / "v1")
    (root / "latest").symlink_to("v1")  # as the publisher leaves it
    return root


@pytest.fixture(scope="module")
def secured(snapshots: dict[str, Path], snapshot_root: Path) -> Iterator[EmbeddedServer]:
    """A server on snapshot ``a`` bound to every interface, hence with a token."""
    server = EmbeddedServer(
        snapshots["a"],
        host="0.0.0.0",
        served_model_name=SERVED_NAME,
        api_key=TOKEN,
        snapshot_root=snapshot_root,
        startup_timeout_s=180,
    )
    server.start()
    yield server
    server.stop()
    assert server.process is not None and server.process.poll() is not None


def _url(server: EmbeddedServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def _chat(server: EmbeddedServer, api_key: str) -> str:
    client = openai.OpenAI(
        base_url=f"{_url(server)}/v1", api_key=api_key, timeout=60, max_retries=0
    )
    reply = client.chat.completions.create(
        model=SERVED_NAME, messages=[{"role": "user", "content": "1 2 3"}], max_tokens=3
    )
    return reply.choices[0].message.content or ""


def _greedy(server: EmbeddedServer) -> Generation:
    async def run() -> Generation:
        async with InferenceClient(_url(server), SERVED_NAME, api_key=TOKEN, timeout_s=60) as c:
            (g,) = await c.complete(PROMPT, max_tokens=8, temperature=0, ignore_eos=True)
            return g

    return asyncio.run(run())


def test_every_request_needs_the_token(secured: EmbeddedServer) -> None:
    for key in ("EMPTY", "tok-wrong", TOKEN + "x"):
        with pytest.raises(openai.AuthenticationError) as info:
            _chat(secured, key)
        assert info.value.status_code == 401
        assert "service.inference_service.api_key" in str(info.value)
    assert isinstance(_chat(secured, TOKEN), str)

    health = f"{_url(secured)}/health"
    assert httpx.get(health, timeout=10).status_code == 401
    bad = httpx.get(health, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
    assert bad.json()["error"]["code"] == "invalid_api_key"
    ok = httpx.get(health, headers=secured.auth_headers, timeout=10)
    assert ok.status_code == 200 and ok.json()["model"] == SERVED_NAME
    reload = httpx.post(
        f"{_url(secured)}/update_weights_from_disk", json={"model_path": "/x"}, timeout=10
    )
    assert reload.status_code == 401


def test_reloads_outside_the_snapshot_root_are_refused(
    secured: EmbeddedServer, snapshots: dict[str, Path], snapshot_root: Path
) -> None:
    before = _greedy(secured)
    v = before.policy_version
    assert v is not None
    (snapshot_root / "escape").symlink_to(snapshots["b"])  # a symlink out of the root
    attempts = {
        "absolute elsewhere": str(snapshots["b"]),
        "dot-dot": f"{snapshot_root}/v1/{os.path.relpath(snapshots['b'], snapshot_root / 'v1')}",
        "symlink out": str(snapshot_root / "escape"),
        "the root itself": str(snapshot_root),
    }
    for name, path in attempts.items():
        resp = httpx.post(
            f"{_url(secured)}/update_weights_from_disk",
            json={"model_path": path, "version": v + 1},
            headers=secured.auth_headers,
            timeout=60,
        )
        assert resp.status_code == 403, (name, resp.text)
        err = resp.json()["error"]
        assert err["code"] == "outside_snapshot_root", name
        assert (
            str(snapshot_root.resolve()) in err["message"] and "--snapshot-root" in err["message"]
        )
        now = _greedy(secured)  # the old weights, the old version
        assert (now.policy_version, now.token_ids) == (before.policy_version, before.token_ids)
    assert ".." in attempts["dot-dot"]

    # a snapshot under the root loads (through the adapter, which sends the token)
    with make_reload_adapter("embedded", _url(secured), timeout_s=120, api_key=TOKEN) as adapter:
        assert adapter.health() == {_url(secured): True}
        (outcome,) = adapter.reload(str(snapshot_root / "latest"), v + 1)
    assert outcome.ok
    after = _greedy(secured)
    assert after.policy_version == v + 1
    assert after.token_ids != before.token_ids


def test_no_bind_beyond_loopback_without_a_token(snapshots: dict[str, Path]) -> None:
    server = EmbeddedServer(snapshots["a"], host="0.0.0.0", api_key="EMPTY")
    with pytest.raises(ServerStartError) as info:
        server.start()
    message = str(info.value)
    assert "\n" not in message
    assert "service.inference_service.api_key" in message and "'0.0.0.0'" in message
    assert server.process is None  # nothing was started

    # the server itself refuses too, before loading anything
    env = {k: v for k, v in os.environ.items() if k != INFERENCE_TOKEN_ENV}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    cmd = [sys.executable, "-m", "backends.inference.embedded", "--model", str(snapshots["a"])]
    done = subprocess.run(
        [*cmd, "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert INFERENCE_TOKEN_ENV in lines[0] and "service.inference_service.api_key" in lines[0]


def test_the_supervisor_sends_the_token(
    snapshots: dict[str, Path], snapshot_root: Path, tmp_path: Path
) -> None:
    """Start (health wait), health checks and reloads of the supervisor all pass the
    token; a reload outside the root does not change the weights served."""
    config = InferenceServiceConfig(served_model_name=SERVED_NAME, api_key=TOKEN)
    supervisor = InferenceSupervisor(
        InferenceSpec(config, snapshot_root=snapshot_root), log_dir=tmp_path
    )
    try:
        (url,) = supervisor.start(snapshots["a"], 0)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 401
        assert supervisor.check() is False  # healthy: its /health carries the token
        supervisor.reload(snapshot_root / "v1", 1)
        assert supervisor.restarts == 0
        assert supervisor.check() is False
        health = httpx.get(f"{url}/health", headers={"Authorization": f"Bearer {TOKEN}"})
        assert health.json()["policy_version"] == 1
    finally:
        supervisor.close()


def test_the_supervisor_gives_the_server_its_cpu_threads(
    snapshots: dict[str, Path], snapshot_root: Path, tmp_path: Path
) -> None:
    """``service.inference_service.cpu_threads`` reaches the server it starts (its
    /health reports torch's threads); 0 gives the automatic half of the cores."""
    import torch

    from nexrl.core.util.cpu import cpu_threads

    assert not torch.cuda.is_available()  # the CPU path: a GPU server gets no thread flag
    for configured, expected in ((3, 3), (0, cpu_threads(1))):
        config = InferenceServiceConfig(served_model_name=SERVED_NAME, cpu_threads=configured)
        supervisor = InferenceSupervisor(
            InferenceSpec(config, snapshot_root=snapshot_root), log_dir=tmp_path
        )
        try:
            (url,) = supervisor.start(snapshots["a"], 0)
            assert httpx.get(f"{url}/health", timeout=10).json()["torch_threads"] == expected
        finally:
            supervisor.close()
