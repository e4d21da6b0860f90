"""Agent service overhead: the same chat calls sent straight to the inference server and
through the recording proxy, side by side in one session.

One embedded server (tiny Qwen2, CPU) and the service (its own process); ``N_CALLS`` sequential chat calls of
``MAX_TOKENS`` greedy tokens (``ignore_eos``: fixed work) with the plain
``openai`` client, all in one session. The proxied variant records every call;
it reports ``overhead_ms_per_call`` (median proxied - median direct, per call)
in ``extra_info``, and ``proxy_only_ms_per_call`` against direct calls that ask
for log-probs and token ids as the proxy does (so the server's extra work is
not counted as proxy cost). Nothing is asserted about time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.util.net import free_port
from tests.integration.inference._helpers import SERVED_NAME

N_CALLS = 16
MAX_TOKENS = 16
ROUNDS = 5
NAME = SERVED_NAME
_times: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def server(
    start_embedded_server: Callable[..., EmbeddedServer], tiny_model_dir: Path
) -> EmbeddedServer:
    return start_embedded_server(tiny_model_dir, batch_window_ms=None)  # the server's defaults


@pytest.fixture(scope="module")
def service(server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service as users run it: its own process (``python -m nexrl.agent_service``).

    In-process (``AgentService`` on a thread next to this client) it measured several
    times slower per call: client and server then share one interpreter.
    """
    port = free_port()
    pool = Path(tmp_path_factory.mktemp("pool")) / "pool.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-m", "nexrl.agent_service", "--pool", str(pool),
           "--upstream", server.base_url, "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # start-up bound
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "service did not start"
            try:
                httpx.get(f"{url}/health", timeout=2).raise_for_status()
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _calls(base_url: str, variant: str, session: str, logprobs: bool = False) -> list[str]:
    client = openai.OpenAI(base_url=base_url, api_key=session, timeout=120, max_retries=0)
    start = time.perf_counter()
    out = []
    for i in range(N_CALLS):
        reply = client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": f"count to {i}"}],
            max_tokens=MAX_TOKENS,
            temperature=0,
            extra_body={"ignore_eos": True, "return_token_ids": logprobs},
            logprobs=logprobs,
        )
        out.append(reply.choices[0].message.content or "")
    _times.setdefault(variant, []).append(time.perf_counter() - start)
    client.close()
    return out


@pytest.mark.benchmark(group="agent-service")
def test_direct_calls(benchmark: Any, server: EmbeddedServer) -> None:
    _calls(server.openai_base_url, "warm-up", "x")
    out = benchmark.pedantic(
        _calls, args=(server.openai_base_url, "direct", "x"), rounds=ROUNDS, iterations=1
    )
    assert len(out) == N_CALLS


@pytest.mark.benchmark(group="agent-service")
def test_direct_calls_with_logprobs(benchmark: Any, server: EmbeddedServer) -> None:
    """What the proxy asks upstream (log-probs and token ids): the server's share of the cost."""
    out = benchmark.pedantic(
        _calls,
        args=(server.openai_base_url, "direct+logprobs", "x", True),
        rounds=ROUNDS,
        iterations=1,
    )
    assert len(out) == N_CALLS


@pytest.mark.benchmark(group="agent-service")
def test_proxied_calls(benchmark: Any, server: EmbeddedServer, service: str) -> None:
    _calls(service, "warm-up", "warm")
    rounds = iter(range(ROUNDS))
    out = benchmark.pedantic(
        lambda: _calls(service, "proxied", f"round-{next(rounds)}"), rounds=ROUNDS, iterations=1
    )
    if "direct" not in _times:  # run alone (-k): measure the baseline here
        for _ in range(ROUNDS):
            _calls(server.openai_base_url, "direct", "x")
    direct = _calls(server.openai_base_url, "check", "x")
    assert out == direct  # greedy: the proxy returns what the server says
    d, p = statistics.median(_times["direct"]), statistics.median(_times["proxied"])
    overhead_ms = (p - d) / N_CALLS * 1000
    benchmark.extra_info.update(
        direct_s=d, proxied_s=p, overhead_ms_per_call=overhead_ms, ratio=p / d
    )
    line = f"direct {d:.3f}s, proxied {p:.3f}s for {N_CALLS} calls: +{overhead_ms:.1f} ms/call"
    if "direct+logprobs" in _times:
        dl = statistics.median(_times["direct+logprobs"])
        proxy_ms = (p - dl) / N_CALLS * 1000
        benchmark.extra_info.update(direct_logprobs_s=dl, proxy_only_ms_per_call=proxy_ms)
        line += f" (direct with log-probs {dl:.3f}s: proxy alone +{proxy_ms:.1f} ms/call)"
    print(f"\nagent service: {line}")
