"""``InferenceClient(version_source=...)`` against real servers: an engine that reports no
policy version (the vLLM stand-in, ``--api vllm``) gets the version the controller says it
loaded, read when the request starts, and the newest version it may be serving, read
when the reply arrives; an engine that reports one keeps its own.
The stand-in also reloads through ``VLLMReloadAdapter``, the path a recipe with
``backend: vllm`` uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from backends.inference.adapters import VLLMReloadAdapter
from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from tests.integration.inference._helpers import SERVED_NAME


@pytest.fixture(scope="module")
def standin(
    start_embedded_server: Callable[..., EmbeddedServer], snapshots: dict[str, Path]
) -> EmbeddedServer:
    return start_embedded_server(snapshots["a"], "--api", "vllm")


class Loaded:
    """The controller's record: ``version``; ``reload_during`` simulates a reload that
    completes while the request runs (the record moves on right after it was read)."""

    def __init__(self, version: int, reload_during: bool = False) -> None:
        self.version, self.reload_during, self.reads = version, reload_during, 0

    def __call__(self) -> int:
        self.reads += 1
        v = self.version
        if self.reload_during:
            self.version += 1
        return v


def versions(
    url: str, source: Loaded, ceiling: Callable[[], int] | None = None
) -> list[tuple[int | None, int | None]]:
    """(policy_version, policy_version_last) of each choice of one request."""

    async def go() -> list[tuple[int | None, int | None]]:
        async with InferenceClient(
            url, SERVED_NAME, version_source=source, version_ceiling=ceiling
        ) as client:
            gens = await client.complete("max 1 2 3", max_tokens=2, n=2)
        return [(g.policy_version, g.policy_version_last) for g in gens]

    return asyncio.run(go())


def test_unversioned_engine_is_tagged_from_the_record(standin: EmbeddedServer) -> None:
    source = Loaded(7)
    assert versions(standin.base_url, source) == [(7, 7), (7, 7)]
    assert source.reads == 2  # when the request starts, and when its reply arrives


def test_request_straddling_a_reload_gets_both_versions(standin: EmbeddedServer) -> None:
    """The record moved on while the request ran: its tokens are tagged with the older
    version (staleness from the oldest token) and the newer one as the last."""
    source = Loaded(3, reload_during=True)
    assert versions(standin.base_url, source) == [(3, 4), (3, 4)]


def test_a_reload_running_at_the_reply_counts_the_version_being_loaded(
    standin: EmbeddedServer,
) -> None:
    """During a weight sync the record still says the old version, but the engine may
    already serve the new one (vLLM resumes before the sync is recorded as ended): the
    ceiling (the pool's ``target_version`` while a sync runs) is the newest."""
    assert versions(standin.base_url, Loaded(5), ceiling=lambda: 6) == [(5, 6), (5, 6)]


def test_a_version_the_engine_reports_wins(server: EmbeddedServer) -> None:
    assert versions(server.base_url, Loaded(7)) == [(0, None), (0, None)]


def test_standin_reloads_through_the_vllm_adapter(
    standin: EmbeddedServer, snapshots: dict[str, Path]
) -> None:
    with VLLMReloadAdapter(standin.base_url, timeout_s=120) as adapter:
        adapter.reload(str(snapshots["b"]), 1)
    health = httpx.get(f"{standin.base_url}/v1/models", timeout=10).json()
    assert health["data"][0]["root"] == str(snapshots["b"])
