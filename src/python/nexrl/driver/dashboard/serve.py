"""The ``/nexrl`` page on a finished (or running) run folder, without Dask: a small
Bokeh server (``python -m nexrl.driver.cli.dashboard runs/<name>``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

__all__ = ["start_server"]


def start_server(root: str | Path, port: int = 0, address: str = "127.0.0.1") -> tuple[Any, str]:
    """Start (not run) a Bokeh server showing ``root``; (server, the page's URL).
    ``server.io_loop.start()`` serves it; ``server.stop()`` stops it."""
    from bokeh.application import Application
    from bokeh.application.handlers.function import FunctionHandler
    from bokeh.server.server import Server

    from nexrl.driver.dashboard.history import RunHistory
    from nexrl.driver.dashboard.page import build_document

    def doc(d: Any) -> None:
        build_document(d, RunHistory(root))

    if not port:  # a free one now: the page's websocket accepts only its own origin
        with socket.socket() as probe:
            probe.bind((address, 0))
            port = int(probe.getsockname()[1])
    # (listening on every address, the browser's host is not known: any origin, and
    # Bokeh says so)
    origins = (
        ["*"]
        if address in ("0.0.0.0", "::", "")
        else [f"{address}:{port}", *([f"localhost:{port}"] if address == "127.0.0.1" else [])]
    )
    server = Server(
        {"/nexrl": Application(FunctionHandler(doc))},
        port=port,
        address=address,
        allow_websocket_origin=origins,
    )
    server.start()
    return server, f"http://{address}:{server.port}/nexrl"
