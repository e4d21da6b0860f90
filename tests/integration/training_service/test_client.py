"""``TrainingClient``'s timeouts and bounded retries, against a real HTTP server on
127.0.0.1 that fails on purpose (``http.server``, counting the requests it gets)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nexrl.trainer.service import TrainingClient, TrainingClientError

COUNTS: dict[str, int] = {}  # requests per path
FAIL = 2


class Flaky(BaseHTTPRequestHandler):
    """503 for the first ``FAIL`` requests of each path, then 200; optim_step sleeps 1 s."""

    def _answer(self) -> None:
        n = COUNTS[self.path] = COUNTS.get(self.path, 0) + 1
        if self.path == "/v1/optim_step":
            time.sleep(1.0)  # longer than the client's timeout
        status = 503 if n <= FAIL else 200
        body = json.dumps(
            {"error": {"message": "busy", "field": None}} if status == 503 else {"n": n}
        ).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    COUNTS.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_read_only_calls_retry_a_busy_service_a_bounded_number_of_times(flaky: str) -> None:
    with TrainingClient(flaky, max_retries=3, backoff_s=0.01) as client:
        assert client.info() == {"n": 3}  # two 503s, then the answer
    assert COUNTS["/v1/info"] == 3
    with (
        TrainingClient(flaky, max_retries=1, backoff_s=0.01) as client,
        pytest.raises(TrainingClientError, match="503: busy") as info,
    ):
        client.extra_state()
    assert info.value.status == 503 and COUNTS["/v1/extra_state"] == 2


def test_calls_that_train_are_never_repeated(flaky: str) -> None:
    with TrainingClient(flaky, max_retries=3, backoff_s=0.01, step_timeout_s=0.3) as client:
        with pytest.raises(TrainingClientError, match="503: busy"):
            client.forward_backward([{"prompt_ids": [1], "response_ids": [2]}], "cross_entropy")
        with pytest.raises(TrainingClientError, match=r"did not answer within 0.3s"):
            client.optim_step()
    assert COUNTS["/v1/forward_backward"] == 1
    time.sleep(1.0)  # let the slow handler finish before counting
    assert COUNTS["/v1/optim_step"] == 1


def test_a_service_that_is_not_there_fails_after_the_retries() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        TrainingClient(f"http://127.0.0.1:{port}", max_retries=2, backoff_s=0.01) as client,
        pytest.raises(TrainingClientError, match="cannot connect") as info,
    ):
        client.optim_step()
    assert info.value.status == 0
