"""``AgentService``: run the service in this process (a uvicorn server on a thread).

The listening socket is bound before the thread starts (port 0 = a free
port), so ``url`` is known at once and there is no port race::

    with AgentService(ServiceConfig(upstream=..., pool=...)) as service:
        client = openai.OpenAI(base_url=service.openai_base_url, api_key=session_id)
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn

from nexrl.agent_service.app import create_app
from nexrl.agent_service.config import ServiceConfig
from nexrl.agent_service.sessions import SessionStore

__all__ = ["AgentService"]


class AgentService:
    def __init__(
        self,
        config: ServiceConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.config, self.host, self.port = config, host, port
        self.startup_timeout_s = startup_timeout_s
        self.app = create_app(config)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def sessions(self) -> SessionStore:
        """The recorded sessions (thread-safe), for in-process users."""
        store: SessionStore = self.app.state.nexrl.sessions
        return store

    def start(self) -> AgentService:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=5)
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="nexrl-agent-service", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the agent service did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._server = self._thread = None

    def __enter__(self) -> AgentService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
