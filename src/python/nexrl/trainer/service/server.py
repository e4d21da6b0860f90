"""``TrainingService``: the training service in this process (uvicorn on a thread).

::

    with TrainingService(spec) as service:          # builds the trainer (DeepSpeed)
        client = TrainingClient(service.base_url)

The socket is bound before the server thread starts (port 0 = a free port), so
``base_url`` is known at once. A ``host`` beyond loopback needs a bearer token
(``token``, or the ``NEXRL_TRAINING_SERVICE_TOKEN`` environment variable):
without one ``start()`` raises ``TrainingServiceStartError`` before building
anything (``nexrl.core.util.auth``).
"""

from __future__ import annotations

import os
import socket
import threading
import time

from nexrl.core.errors import NexrlError
from nexrl.core.process.local_service import LocalService
from nexrl.core.util.auth import bind_refusal, token_of
from nexrl.core.util.net import SERVER_KEEP_ALIVE_S
from nexrl.trainer.service.core import TrainingCore
from nexrl.trainer.spec import TrainerSpec

__all__ = ["TOKEN_ENV", "TrainingService", "TrainingServiceStartError", "build_core"]

TOKEN_ENV = "NEXRL_TRAINING_SERVICE_TOKEN"


class TrainingServiceStartError(RuntimeError, NexrlError):
    """The training service cannot start as configured (the message says why)."""


def build_core(spec: TrainerSpec) -> TrainingCore:
    """Build the recipe's trainer (one rank, this process) and wrap it."""
    import torch

    from nexrl.core.util.cpu import cpu_threads
    from nexrl.trainer.registry import create_trainer

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        torch.set_num_threads(cpu_threads(1, spec.trainer.cpu_threads))
    return TrainingCore(create_trainer(spec))


class TrainingService(LocalService):
    def __init__(
        self,
        spec: TrainerSpec | None = None,
        *,
        core: TrainingCore | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        if (spec is None) == (core is None):
            raise ValueError("TrainingService: pass a TrainerSpec or a TrainingCore")
        self.spec, self.core, self.host, self.port = spec, core, host, port
        self.token = token_of(token if token is not None else os.environ.get(TOKEN_ENV))
        self.startup_timeout_s = startup_timeout_s
        self._server: object | None = None
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._server is not None

    def start(self) -> TrainingService:
        import uvicorn

        from nexrl.trainer.service.app import create_app

        why = bind_refusal(
            self.host,
            self.token,
            what="the training service",
            field=f"a token (the {TOKEN_ENV} environment variable; token= in Python)",
        )
        if why:
            raise TrainingServiceStartError(why)
        if self.core is None:
            assert self.spec is not None
            self.core = build_core(self.spec)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        app = create_app(self.core, self.token)
        config = uvicorn.Config(
            app,
            log_level="warning",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": [sock]},
            name="nexrl-training-service",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise TrainingServiceStartError(
                    f"the training service did not start on {self.base_url}"
                )
            time.sleep(0.02)
        return self

    def serve_forever(self) -> None:
        """Block until the server stops (``request_stop``; Ctrl-C raises here)."""
        thread = self._thread
        while thread is not None and thread.is_alive():
            thread.join(timeout=1.0)

    def request_stop(self) -> None:
        """Ask the server to stop (safe from a signal handler); ``serve_forever`` returns."""
        if self._server is not None:
            self._server.should_exit = True  # type: ignore[attr-defined]

    def stop(self, close_trainer: bool = True) -> None:
        server = self._server
        if server is not None:
            server.should_exit = True  # type: ignore[attr-defined]
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._server = self._thread = None
        if close_trainer and self.core is not None and self.spec is not None:
            self.core.close()
            self.core = None
