"""A server that hangs, dies mid-request or cannot start: clear errors, never a hang,
no process left behind."""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer, ServerStartError
from nexrl.core.chat import InferenceClient, InferenceError
from tests.integration.inference._helpers import SERVED_NAME

LONG: dict[str, Any] = {"max_tokens": 480, "n": 8, "temperature": 1.0, "ignore_eos": True}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_hung_then_killed_server(
    start_embedded_server: Callable[..., EmbeddedServer], snapshots: dict[str, Path]
) -> None:
    server = start_embedded_server(snapshots["a"])
    pid = server.pid
    assert pid is not None
    try:
        # Hung: the process is stopped; the kernel still accepts connections.
        os.kill(pid, signal.SIGSTOP)
        try:
            client = InferenceClient(server.base_url, SERVED_NAME, timeout_s=2.0, max_retries=2)
            start = time.monotonic()
            with pytest.raises(InferenceError, match="did not answer within 2s"):
                asyncio.run(client.complete([5, 6, 7], max_tokens=2))
            assert time.monotonic() - start < 4.0
        finally:
            os.kill(pid, signal.SIGCONT)

        # Killed while a long request runs: four of the largest requests (n=64, the
        # server's most) at once, the last one queued behind the others, so it is far
        # from done when the kill comes (a single request not done at 0.5 s could finish
        # in the moment before the kill: it did once in CI).
        async def killed_mid_request() -> float:
            async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=60) as c:
                tasks = [
                    asyncio.create_task(c.complete([5, 6, 7], **{**LONG, "n": 64}))
                    for _ in range(4)
                ]
                await asyncio.sleep(0.5)
                task = tasks[-1]
                if task.done():
                    pytest.fail("4 x 64 long samples finished within 0.5 s: none left to kill")
                server.kill()
                killed_at = time.monotonic()
                with pytest.raises(InferenceError) as info:
                    await task
                assert info.value.base_url == server.base_url
                await asyncio.gather(*tasks[:-1], return_exceptions=True)
                return time.monotonic() - killed_at

        assert asyncio.run(killed_mid_request()) < 10.0
        assert not _alive(pid)

        async def after_death() -> None:
            async with InferenceClient(server.base_url, SERVED_NAME, timeout_s=30) as c:
                await c.complete([5], max_tokens=1)

        start = time.monotonic()
        with pytest.raises(InferenceError, match="cannot reach"):
            asyncio.run(after_death())
        assert time.monotonic() - start < 10.0
    finally:
        server.stop()


def test_server_that_cannot_start_is_reported(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "no_model", startup_timeout_s=120)
    with pytest.raises(ServerStartError, match="exited with") as info:
        server.start()
    assert "no_model" in str(info.value)  # the log tail says why
    assert server.process is not None and server.process.poll() is not None


class _Unready(http.server.BaseHTTPRequestHandler):
    """A server that is up but not ready: 503 on /health (an engine still loading)."""

    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_replicas_that_never_get_healthy_are_named_with_why_and_the_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``--inference-url`` with a mistyped port (nothing listens) beside a server that
    answers 503: a line while it waits, then one error naming each replica's problem
    and ``startup_timeout_s``."""
    from nexrl.core.config.sections.runtime import InferenceServiceConfig
    from nexrl.inference.spec import InferenceSpec
    from nexrl.inference.supervisor import InferenceSupervisor, ServiceError

    unready = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unready)
    threading.Thread(target=unready.serve_forever, daemon=True).start()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    ready = f"http://127.0.0.1:{unready.server_address[1]}"
    config = InferenceServiceConfig(base_urls=[closed, ready], startup_timeout_s=3.0)
    supervisor = InferenceSupervisor(InferenceSpec(config, wait_notice_s=1.0), log_dir=tmp_path)
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(ServiceError) as info:
            supervisor.start(tmp_path / "unused", 0)
    finally:
        supervisor.close()
        unready.shutdown()
    msg = str(info.value)
    assert msg.startswith(
        "inference replicas not healthy after 3s (service.inference_service.startup_timeout_s): "
    )
    assert f"{closed}: ConnectError: " in msg and f"{ready}: HTTP 503 from /health" in msg
    assert "--inference-url" in msg
    waiting = [r.getMessage() for r in caplog.records if "inference: waiting for" in r.getMessage()]
    assert waiting and f"{ready}: HTTP 503 from /health" in waiting[0]
    assert "of startup_timeout_s=3)" in waiting[0]
