"""Embedded inference server: dynamic batching vs the same requests sent one by one.

One server process (tiny Qwen2, CPU), ``N_REQUESTS`` completion requests of
``MAX_TOKENS`` greedy tokens each (``ignore_eos``: fixed work). The baseline
awaits them sequentially; the batched variant sends them concurrently and the
server batches them into one padded forward loop. Both run in the same
session against the same server under the ``inference-batching`` group; the
batched test records ``speedup_vs_sequential`` (sequential time / batched
time) in ``extra_info`` and prints it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.inference import Generation, InferenceClient
from tests.integration.inference._helpers import SERVED_NAME

N_REQUESTS = 8
MAX_TOKENS = 32
ROUNDS = 3
NAME = SERVED_NAME
_times: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def server(
    start_embedded_server: Callable[..., EmbeddedServer], tiny_model_dir: Path
) -> EmbeddedServer:
    return start_embedded_server(
        tiny_model_dir, "--max-batch-size", str(N_REQUESTS), batch_window_ms=10
    )


def _prompts() -> list[list[int]]:
    return [[10 + i, 20 + i, 30, 40] for i in range(N_REQUESTS)]


async def _one(client: InferenceClient, prompt: list[int]) -> Generation:
    (g,) = await client.complete(prompt, max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
    return g


async def _sequential(client: InferenceClient) -> list[Generation]:
    return [await _one(client, p) for p in _prompts()]


async def _concurrent(client: InferenceClient) -> list[Generation]:
    return list(await asyncio.gather(*(_one(client, p) for p in _prompts())))


def _run(server: EmbeddedServer, variant: str) -> list[Generation]:
    async def go() -> list[Generation]:
        async with InferenceClient(server.base_url, NAME, timeout_s=120) as client:
            start = time.perf_counter()
            out = await (_concurrent(client) if variant == "batched" else _sequential(client))
            _times.setdefault(variant, []).append(time.perf_counter() - start)
            return out

    return asyncio.run(go())


def _check(out: list[Generation]) -> None:
    assert [g.prompt_token_ids for g in out] == _prompts()
    assert all(len(g.token_ids) == MAX_TOKENS for g in out)


@pytest.mark.benchmark(group="inference-batching")
def test_sequential_requests(benchmark: Any, server: EmbeddedServer) -> None:
    _run(server, "sequential")  # warm-up (first request pays lazy init)
    _times.pop("sequential")
    out = benchmark.pedantic(_run, args=(server, "sequential"), rounds=ROUNDS, iterations=1)
    _check(out)
    benchmark.extra_info["tokens_per_s"] = N_REQUESTS * MAX_TOKENS / min(_times["sequential"])


@pytest.mark.benchmark(group="inference-batching")
def test_dynamic_batching(benchmark: Any, server: EmbeddedServer) -> None:
    _run(server, "batched")
    _times.pop("batched")
    out = benchmark.pedantic(_run, args=(server, "batched"), rounds=ROUNDS, iterations=1)
    _check(out)
    if "sequential" not in _times:  # run alone (-k): measure the baseline here
        for _ in range(ROUNDS):
            _run(server, "sequential")
    seq, bat = statistics.median(_times["sequential"]), statistics.median(_times["batched"])
    speedup = seq / bat
    benchmark.extra_info.update(
        tokens_per_s=N_REQUESTS * MAX_TOKENS / bat,
        sequential_s=seq,
        batched_s=bat,
        speedup_vs_sequential=speedup,
    )
    print(f"\ninference batching: sequential {seq:.3f}s, batched {bat:.3f}s, x{speedup:.2f}")
    assert speedup > 1.5, f"dynamic batching is only x{speedup:.2f} faster than sequential"
