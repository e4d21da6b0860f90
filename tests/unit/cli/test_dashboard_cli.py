"""``nexrl dashboard``: a folder that is not a run folder is one error line, exit 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nexrl.driver.cli.dashboard import main


def test_a_folder_without_metrics_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {tmp_path}: no metrics.jsonl here; pass a run folder (output_dir of a run)"
    )


def test_a_port_in_use_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    with socket.socket() as taken:  # a real listener holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port} (")
    assert err.endswith("pick another --port (0: a free one) or an --address of this machine")
    assert "\n" not in err and "Traceback" not in err


def test_the_pages_websocket_refuses_another_sites_origin(tmp_path: Path) -> None:
    """With the default port (0: a free one) the page's websocket accepted any origin
    (Bokeh warned of it on every start): any web page open in the browser could read the
    run's data."""
    from tornado.httpclient import HTTPClientError, HTTPRequest
    from tornado.websocket import websocket_connect

    from nexrl.driver.dashboard.serve import start_server

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    server, url = start_server(tmp_path)
    ws = url.replace("http://", "ws://") + "/ws"

    async def status(origin: str) -> int:
        try:
            conn = await websocket_connect(HTTPRequest(ws, headers={"Origin": origin}))
        except HTTPClientError as exc:
            return int(exc.code)
        conn.close()
        return 101

    try:
        foreign = server.io_loop.run_sync(lambda: status("http://evil.example"))
        own = server.io_loop.run_sync(lambda: status(url.rsplit("/", 1)[0]))
    finally:
        server.stop()
    assert foreign == 403
    assert own != 403  # (refused later for want of Bokeh's session token, not its origin)
