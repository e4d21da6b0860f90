"""Load on the agent service: hundreds of concurrent agent sessions through the recording
proxy, side by side with the same load sent straight to the inference server.

One embedded server (tiny Qwen2, CPU) and the service as users run it (its own
process, ``python -m nexrl.agent_service``). A stand-in agent: ``CALLS`` chat calls
in one conversation (each reply appended to the next call's messages) of
``MAX_TOKENS`` sampled tokens, then its reward reported
(``POST /v1/sessions/{id}/reward``). ``SESSIONS`` such agents run at once, as one
burst, ``BURSTS`` bursts in a row with the real ``openai`` async client.

Measured (``extra_info``, docs/benchmarks.md "Agent service under load"): call
latency percentiles (p50, p90, p99) through the proxy and direct (the same calls,
as many at once, asking for log-probs and token ids as the proxy does), the
bursts' wall time, and the service's RSS before the first burst and after each
(its sessions ended). Asserted: every call answered, every session's trajectories
in the pool exactly once (no session lost, none written twice), no session left
open after a burst. Nothing is asserted about time or memory. ``NEXRL_AGENT_LOAD``
(``sessions,calls,bursts``) changes the load; CI's is 200 sessions x 3 calls x 2
bursts (~1.5 min), the table's in docs/benchmarks.md longer.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import psutil
import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.pool import read_pool
from tests.benchmarks.test_bench_agent_service import server, service  # noqa: F401 fixtures
from tests.integration.inference._helpers import SERVED_NAME

LOAD = os.environ.get("NEXRL_AGENT_LOAD", "200,3,2")
SESSIONS, CALLS, BURSTS = (int(x) for x in LOAD.split(","))
MAX_TOKENS = 4
TIMEOUT_S = 300.0


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
            max_tokens=MAX_TOKENS,
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
    client = openai.AsyncOpenAI(base_url=base_url, api_key="load", timeout=TIMEOUT_S, max_retries=0)
    http = httpx.AsyncClient(base_url=root, timeout=TIMEOUT_S) if root else None
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
        if "nexrl.agent_service" in cmd and any(root.rsplit(":", 1)[1] == c for c in cmd):
            return proc.pid
    raise AssertionError(f"no agent service process for {root}")


@pytest.mark.benchmark(group="agent-load")
def test_sessions_under_load(
    benchmark: Any,
    server: EmbeddedServer,  # noqa: F811 - the imported fixture
    service: str,  # noqa: F811 - the imported fixture
) -> None:
    root = service.removesuffix("/v1")
    proc = psutil.Process(_service_pid(root))
    health = httpx.get(f"{root}/health", timeout=30).json()
    pool_path = Path(health["pool"])
    asyncio.run(_burst(service, root, 10_000_000, SESSIONS // 10))  # warm-up
    rss = [proc.memory_info().rss]
    bursts: list[dict[str, Any]] = []

    def one_burst() -> None:
        gid = len(bursts) * SESSIONS
        bursts.append(asyncio.run(_burst(service, root, gid)))
        state = httpx.get(f"{root}/health", timeout=30).json()
        assert state["open_sessions"] == 0, state  # every session ended with its reward
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
