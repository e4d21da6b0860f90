"""A vLLM that stops answering in the middle of a weight update: each phase of the
update has the deadline ``service.inference_service.reload_timeout_s``, the failure
names the phase and the setting, and generation is resumed all the same.

The server is a stand-in, named as such: an HTTP server on 127.0.0.1 that answers
vLLM's weight-update routes at once, except ``/update_weights``, which it holds
(a hung engine cannot be made to order in the real vLLM; its answers on the routes
it does answer are the real ones, run in ``tests/e2e/test_vllm_transfer.py``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from backends.inference.adapters import VLLMReloadAdapter
from nexrl.inference.reload import ReloadError


class _HungUpdate(BaseHTTPRequestHandler):
    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        self.calls.append(path)
        if path == "/update_weights":
            time.sleep(5)  # hung (the client gives up first)
        body = json.dumps({"message": "ok"}).encode()
        # the client that gave up on the held call has closed its connection
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hung_vllm() -> Iterator[str]:
    _HungUpdate.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HungUpdate)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_hung_update_fails_at_its_deadline_naming_the_phase_and_resumes(
    hung_vllm: str,
) -> None:
    adapter = VLLMReloadAdapter([hung_vllm], timeout_s=1.0)
    descriptor = {"id": "c1", "transport": "shm", "nbytes": 256, "version": 3, "layout": []}
    start = time.monotonic()
    try:
        with pytest.raises(ReloadError) as err:
            adapter.reload_from_channel(descriptor, 3)
    finally:
        adapter.close()
    assert time.monotonic() - start < 4.5  # the deadline, not the hung call
    assert "vLLM's update_weights did not answer in 1s" in str(err.value)
    assert "(service.inference_service.reload_timeout_s)" in str(err.value)
    # the session was ended and generation resumed, though the update never answered
    assert _HungUpdate.calls[-2:] == ["/finish_weight_update", "/resume"]
    assert _HungUpdate.calls[:3] == [
        "/init_weight_transfer_engine",
        "/pause",
        "/start_weight_update",
    ]
