"""Agent service overhead: the same chat calls sent straight to the inference server and
through the recording proxy, side by side in one session; and the service under load
(hundreds of concurrent sessions: ``test_sessions_under_load``, its section below).

One embedded server (tiny Qwen2, CPU) and the service (its own process); ``N_CALLS`` sequential chat calls of
``MAX_TOKENS`` greedy tokens (``ignore_eos``: fixed work) with the plain
``openai`` client, all in one session. The proxied variant records every call;
it reports ``overhead_ms_per_call`` (median proxied - median direct, per call)
in ``extra_info``, and ``proxy_only_ms_per_call`` against direct calls that ask
for log-probs and token ids as the proxy does (so the server's extra work is
not counted as proxy cost). Nothing is asserted about time.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import psutil
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.pool import read_pool
from nexrl.core.util.net import free_port
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
    """The service as users run it: its own process (``python -m nexrl.rollout.agent_service``).

    In-process (``AgentService`` on a thread next to this client) it measured several
    times slower per call: client and server then share one interpreter.
    """
    port = free_port()
    pool = Path(tmp_path_factory.mktemp("pool")) / "pool.zarr"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-m", "nexrl.rollout.agent_service", "--pool", str(pool),
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


# -- Under load ------------------------------------------------------------------
# Load on the agent service: hundreds of concurrent agent sessions through the recording
# proxy, side by side with the same load sent straight to the inference server.
#
# One embedded server (tiny Qwen2, CPU) and the service as users run it (its own
# process, ``python -m nexrl.rollout.agent_service``). A stand-in agent: ``CALLS`` chat calls
# in one conversation (each reply appended to the next call's messages) of
# ``LOAD_MAX_TOKENS`` sampled tokens, then its reward reported
# (``POST /v1/sessions/{id}/reward``). ``SESSIONS`` such agents run at once, as one
# burst, ``BURSTS`` bursts in a row with the real ``openai`` async client.
#
# Measured (``extra_info``, docs/benchmarks.md "Agent service under load"): call
# latency percentiles (p50, p90, p99) through the proxy and direct (the same calls,
# as many at once, asking for log-probs and token ids as the proxy does), the
# bursts' wall time, and the service's RSS before the first burst and after each
# (its sessions ended). Asserted: every call answered, every session's trajectories
# in the pool exactly once (no session lost, none written twice), no session left
# open after a burst. Nothing is asserted about time or memory. ``NEXRL_AGENT_LOAD``
# (``sessions,calls,bursts``) changes the load; CI's is 200 sessions x 3 calls x 2
# bursts (~1.5 min), the table's in docs/benchmarks.md longer.

LOAD = os.environ.get("NEXRL_AGENT_LOAD", "200,3,2")
SESSIONS, CALLS, BURSTS = (int(x) for x in LOAD.split(","))
LOAD_MAX_TOKENS = 4
LOAD_TIMEOUT_S = 300.0


async def _agent(
    client: openai.AsyncOpenAI, http: httpx.AsyncClient | None, sid: str, gid: int
) -> tuple[list[float], dict[str, Any] | None]:
    """One stand-in agent: ``CALLS`` calls in one conversation, then its reward (when
    ``http``, the service's root, is given); the calls' latencies and the report."""
    messages: list[dict[str, str]] = [{"role": "user", "content": f"agent {gid}: count"}]
    latencies = []
    for _ in range(CALLS):
        t = time.perf_counter()
        reply = await client.chat.completions.create(
            model=SERVED_NAME,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=LOAD_MAX_TOKENS,
            temperature=1.0,
            logprobs=True,
            extra_body={"return_token_ids": True},
            extra_headers={"X-NexRL-Session": sid},
        )
        latencies.append(time.perf_counter() - t)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content or ""},
            {"role": "user", "content": "go on"},
        ]
    if http is None:
        return latencies, None
    got = await http.post(f"/v1/sessions/{sid}/reward", json={"reward": 1.0, "group_id": gid})
    got.raise_for_status()
    return latencies, got.json()


async def _burst(
    base_url: str, root: str | None, first_gid: int, sessions: int = SESSIONS
) -> dict[str, Any]:
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="load", timeout=LOAD_TIMEOUT_S, max_retries=0
    )
    http = httpx.AsyncClient(base_url=root, timeout=LOAD_TIMEOUT_S) if root else None
    start = time.perf_counter()
    try:
        done = await asyncio.gather(
            *(_agent(client, http, f"load-{first_gid + i}", first_gid + i) for i in range(sessions))
        )
    finally:
        await client.close()
        if http is not None:
            await http.aclose()
    return {
        "wall_s": time.perf_counter() - start,
        "latencies": [x for lat, _ in done for x in lat],
        "reports": [r for _, r in done if r is not None],
    }


def _percentiles(latencies: list[float]) -> dict[str, float]:
    p = np.percentile(np.asarray(latencies) * 1000, [50, 90, 99])
    return {"p50_ms": float(p[0]), "p90_ms": float(p[1]), "p99_ms": float(p[2])}


def _service_pid(root: str) -> int:
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "nexrl.rollout.agent_service" in cmd and any(root.rsplit(":", 1)[1] == c for c in cmd):
            return proc.pid
    raise AssertionError(f"no agent service process for {root}")


@pytest.mark.benchmark(group="agent-load")
def test_sessions_under_load(
    benchmark: Any,
    server: EmbeddedServer,
    service: str,
) -> None:
    root = service.removesuffix("/v1")
    proc = psutil.Process(_service_pid(root))
    health = httpx.get(f"{root}/health", timeout=30).json()
    pool_path = Path(health["pool"])
    left_open = health["open_sessions"]  # by the tests above (never rewarded)
    asyncio.run(_burst(service, root, 10_000_000, SESSIONS // 10))  # warm-up
    rss = [proc.memory_info().rss]
    bursts: list[dict[str, Any]] = []

    def one_burst() -> None:
        gid = 1_000_000 + len(bursts) * SESSIONS  # no other test's group ids
        bursts.append(asyncio.run(_burst(service, root, gid)))
        state = httpx.get(f"{root}/health", timeout=30).json()
        assert state["open_sessions"] == left_open, state  # each of its sessions ended
        rss.append(proc.memory_info().rss)

    benchmark.pedantic(one_burst, rounds=BURSTS, iterations=1)
    direct = asyncio.run(_burst(server.openai_base_url, None, 0))

    # every call answered; every session written once, with all its calls
    for burst in bursts:
        assert len(burst["latencies"]) == SESSIONS * CALLS
        assert [r["model_calls"] for r in burst["reports"]] == [CALLS] * SESSIONS
    ds = read_pool(str(pool_path))
    gids = ds["group_id"].values
    written = {int(g): int(n) for g, n in zip(*np.unique(gids, return_counts=True), strict=True)}
    expected = {
        int(r["group_id"]): int(r["trajectories"]) for burst in bursts for r in burst["reports"]
    }
    assert {g: written.get(g, 0) for g in expected} == expected  # none lost, none twice
    assert len(expected) == SESSIONS * BURSTS

    proxied = [x for burst in bursts for x in burst["latencies"]]
    info = {
        "sessions": SESSIONS,
        "calls_per_session": CALLS,
        "bursts": BURSTS,
        "proxied": _percentiles(proxied),
        "direct": _percentiles(direct["latencies"]),
        "proxied_burst_s": statistics.median(b["wall_s"] for b in bursts),
        "direct_burst_s": direct["wall_s"],
        "service_rss_mb": [round(r / 2**20, 1) for r in rss],
        "trajectories_written": sum(expected.values()),
    }
    benchmark.extra_info.update(info)
    print(f"\nagent service under load: {info}")
