"""``AgentService``: run the service in this process (a uvicorn server on a thread).

The listening socket is bound before the thread starts (port 0 = a free
port), so ``base_url`` is known at once and there is no port race::

    with AgentService(ServiceConfig(upstream=..., pool=...)) as service:
        client = openai.OpenAI(base_url=service.openai_base_url, api_key=session_id)

A ``host`` beyond loopback needs ``ServiceConfig.token``: without one ``start()``
raises ``AgentServiceStartError`` (one line) before binding anything.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from nexrl.core.errors import NexrlError
from nexrl.core.process.local_service import LocalService
from nexrl.core.util.auth import AGENT_SERVICE_TOKEN_ENV, bind_refusal
from nexrl.core.util.net import SERVER_KEEP_ALIVE_S
from nexrl.rollout.agent_service.app import create_app
from nexrl.rollout.agent_service.config import ServiceConfig
from nexrl.rollout.agent_service.sessions import SessionStore

__all__ = ["AgentService", "AgentServiceStartError"]


class AgentServiceStartError(RuntimeError, NexrlError):
    """The agent service cannot start as configured (the message says why and what to set)."""


def refusal(host: str, token: str | None) -> str | None:
    """Why the service must not bind ``host`` with ``token`` (None: it may)."""
    return bind_refusal(
        host,
        token,
        what="the agent service",
        field=f"a token (the {AGENT_SERVICE_TOKEN_ENV} environment variable; "
        "ServiceConfig.token in Python)",
    )


class AgentService(LocalService):
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
    def started(self) -> bool:
        return self._server is not None

    @property
    def sessions(self) -> SessionStore:
        """The recorded sessions (thread-safe), for in-process users."""
        store: SessionStore = self.app.state.nexrl.sessions
        return store

    def start(self) -> AgentService:
        why = refusal(self.host, self.config.token)
        if why:
            raise AgentServiceStartError(why)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        )
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="nexrl-agent-service", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the agent service did not start on {self.base_url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._server = self._thread = None
