"""``python -m nexrl.rollout.agent_service`` as a separate process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.util.net import free_port
from nexrl.rollout.agent_service import report_reward
from tests.integration.agent_service._plain_agent import run_agent
from tests.integration.agent_service._pool import read_pool
from tests.integration.inference._helpers import SERVED_NAME


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexrl.rollout.agent_service", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )


@pytest.fixture
def service_process(embedded_server: EmbeddedServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    pool = tmp_path / "pool"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nexrl.rollout.agent_service", "--pool", str(pool),
         "--upstream", embedded_server.openai_base_url, "--port", str(port)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # start-up bound, not a speed assertion
        while True:
            assert proc.poll() is None, f"agent service exited: {proc.communicate()[0]}"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "agent service did not come up"
            time.sleep(0.1)
        yield url, pool
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_cli_service_records_a_plain_agent(service_process: tuple[str, Path]) -> None:
    url, pool = service_process
    health = httpx.get(f"{url}/health", timeout=5).json()
    assert health["open_sessions"] == 0 and health["pool"] == str(pool)
    run_agent(f"{url}/v1", "cli-episode", SERVED_NAME, "hello", turns=2)
    out = report_reward(url, "cli-episode", 1.0, "t", trajectory_mode="per_call")
    assert out["trajectories"] == 2
    assert [t.extra_info["session"] for t in read_pool(str(pool))] == ["cli-episode"] * 2
    assert httpx.get(f"{url}/health", timeout=5).json()["trajectories_written"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "p", "--upstream", "ftp://x"], "--upstream: base URL must start with http"),
        (["--pool", "p", "--upstream", "http://x", "--max-sessions", "0"], "max_sessions"),
        (["--upstream", "http://x"], "--pool"),
    ],
)
def test_cli_errors_name_the_flag(args: list[str], message: str) -> None:
    result = _cli(*args)
    assert result.returncode == 2 and message in result.stderr
