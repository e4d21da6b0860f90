"""Constants and a server starter shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

from backends.inference.embedded import EmbeddedServer

SERVED_NAME = "tiny"
MESSAGES = [{"role": "user", "content": "What is the largest of 3 7 5?"}]


def start_server(model: Path, *extra: str) -> EmbeddedServer:
    """A started (healthy) server on ``model`` that batches within 20 ms."""
    return EmbeddedServer(
        model,
        served_model_name=SERVED_NAME,
        extra_args=["--batch-window-ms", "20", *extra],
        startup_timeout_s=180,
    ).start()
