"""``EmbeddedServer``: run the embedded server as a subprocess, health-checked.

The parent binds the listening socket (port 0 = a free port, no race) and
hands it to the child (``--fd``), then closes its own copy so a dead child
means refused connections, not a hang. The child runs in its own session
(process group); ``stop()`` sends SIGTERM, then SIGKILL after a grace period,
and a finalizer does the same if the handle is dropped or the interpreter
exits, so no orphan is left behind.

The child gets ``PYTHONPATH`` = this interpreter's ``sys.path``, so it
imports the same sources even where the interpreter's own environment does
not carry them (a Pants sandbox). A ``command`` does not: it gets this
process's environment as it is (its own Python, e.g. vLLM's venv, must not
import nexrl's packages).

With ``command`` (``service.inference_service.command``: a vLLM or SGLang
server, or any OpenAI-compatible one) the same handle starts that command
instead, with ``{model}``, ``{host}``, ``{port}`` and ``{served_model_name}``
filled in: the port is picked free and released just before the start (a
command cannot take an open socket), the command gets no embedded-server flags,
and it dies with this process (``PR_SET_PDEATHSIG``) as the embedded server does.

Security (``nexrl.core.util.auth``): ``api_key`` (a bearer token; ``None``/``"EMPTY"``
= none) reaches the child in its environment (``NEXRL_INFERENCE_TOKEN``, and
``VLLM_API_KEY`` for a ``command``: vLLM checks it on its ``/v1`` routes), and
this handle sends it with its own health checks. A ``host`` beyond loopback
without a token is refused before anything starts. ``snapshot_root``: the
embedded server reloads only directories under it (``--snapshot-root``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from backends.inference.embedded.launch import (
    die_with_parent,
    fork_warm,
    spawn,
    terminate,
    warm_context,
)
from nexrl.core.errors import NexrlError
from nexrl.core.process.local_service import LocalService
from nexrl.core.util.auth import INFERENCE_TOKEN_ENV, bind_refusal, token_of

if TYPE_CHECKING:
    # Never imported at run time (the child process runs them); listed so that
    # dependency inference (Pants) ships the server modules with this handle.
    import backends.inference.embedded.__main__
    import backends.inference.embedded.cli  # noqa: F401


class ServerStartError(RuntimeError, NexrlError):
    """The server exited or did not become healthy in time; the message has its log tail.
    ``timed_out``: it was still starting when ``startup_timeout_s`` ran out (stopped since)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def fill_command(command: str, **fields: str) -> list[str]:
    """``command`` split like a shell line, with ``{model}``-style fields filled in;
    a field the command names that is not given is an error naming it."""
    import shlex

    try:
        return [part.format(**fields) for part in shlex.split(command)]
    except (KeyError, IndexError) as exc:
        raise ServerStartError(
            f"service.inference_service.command names {exc} but only "
            f"{', '.join('{' + k + '}' for k in fields)} are filled in"
        ) from None


class EmbeddedServer(LocalService):
    """Start/stop ``python -m backends.inference.embedded`` and know its URLs.

    Example::

        with EmbeddedServer("/path/to/model") as server:
            client = openai.OpenAI(base_url=server.openai_base_url, api_key="x")
    """

    def __init__(
        self,
        model: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        served_model_name: str | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        log_path: str | Path | None = None,
        exit_with_parent: bool = True,
        command: str | None = None,
        api_key: str | None = None,
        snapshot_root: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``log_path``: server stdout/stderr (default: a temp file removed by ``stop()``).
        ``env``: variables set in the server's environment besides this process's.
        ``exit_with_parent``: the server exits by itself when this process dies, even
        by SIGKILL (it runs in its own session, so it would otherwise be orphaned).
        ``command``: start this server command instead; ``api_key``, ``snapshot_root``:
        see the module doc."""
        self.command = command
        self.token = token_of(api_key)
        self.snapshot_root = None if snapshot_root is None else str(snapshot_root)
        self.env = dict(env or {})
        self.model = str(model)
        self.host, self.port = host, port
        self.served_model_name = served_model_name or self.model
        self.extra_args = list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path) if log_path else None
        self._own_log = log_path is None  # a temp log, removed by stop()
        self.exit_with_parent = exit_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    # -- process ------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    def alive(self) -> bool:
        """Started and not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> EmbeddedServer:
        if self._proc is not None:
            raise RuntimeError("server already started")
        refusal = bind_refusal(
            self.host,
            self.token,
            what="the inference server",
            field="service.inference_service.api_key",
        )
        if refusal:
            raise ServerStartError(refusal)
        sock = socket.create_server((self.host, self.port), backlog=128)
        self.port = sock.getsockname()[1]
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="nexrl-embedded-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        fds: tuple[int, ...] = ()
        if self.command is not None:
            sock.close()  # the command binds the port itself
            cmd, preexec = self._command_argv(), die_with_parent
        else:
            args = self._server_args()
            cmd = [
                sys.executable,
                "-m",
                "backends.inference.embedded",
                *args,
                "--fd",
                str(sock.fileno()),
                *(["--parent-pid", str(os.getpid())] if self.exit_with_parent else []),
            ]
            fds, preexec = (sock.fileno(),), None
        env = {**os.environ, **self.env}
        if self.command is None:
            env["PYTHONPATH"] = os.pathsep.join(sys.path)
        # A command runs in its own environment (vLLM in a venv of its own): this
        # interpreter's import path on its PYTHONPATH would shadow that venv's packages.
        env.pop(INFERENCE_TOKEN_ENV, None)  # only the token this handle was given
        if self.token:
            env[INFERENCE_TOKEN_ENV] = self.token
            if self.command is not None:
                env["VLLM_API_KEY"] = self.token
        warm = None if self.command is not None else warm_context()
        if warm is not None:
            try:
                self._proc = fork_warm(  # type: ignore[assignment]
                    warm, args, sock, env, self.log_path, self.exit_with_parent
                )
            except OSError as exc:
                raise ServerStartError(f"could not fork the server: {exc}") from exc
            finally:
                sock.close()
        else:
            self._spawn_process(cmd, env, fds, preexec, sock)
        assert self._proc is not None
        self._finalizer = weakref.finalize(self, terminate, self._proc, 5.0)
        try:
            self.wait_healthy(self.startup_timeout_s)
        except BaseException:
            self.stop()  # the error message already carries the log tail
            raise
        return self

    def _spawn_process(
        self,
        cmd: list[str],
        env: dict[str, str],
        fds: tuple[int, ...],
        preexec: Any,
        sock: socket.socket,
    ) -> None:
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            try:
                self._proc = spawn(
                    cmd,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    pass_fds=fds,
                    start_new_session=True,
                    preexec_fn=preexec if self.exit_with_parent else None,
                )
            except OSError as exc:
                raise ServerStartError(f"could not run {cmd[0]!r}: {exc}") from exc
            finally:
                sock.close()  # the child owns the listening socket now

    def _server_args(self) -> list[str]:
        """The embedded server's flags but ``--fd`` and ``--parent-pid``."""
        return [
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *(["--snapshot-root", self.snapshot_root] if self.snapshot_root else []),
            *self.extra_args,
        ]

    def _command_argv(self) -> list[str]:
        assert self.command is not None
        return fill_command(
            self.command,
            model=self.model,
            host=self.host,
            port=str(self.port),
            served_model_name=self.served_model_name,
        )

    def wait_healthy(self, timeout_s: float) -> None:
        """Poll ``/health`` until 200; raise ``ServerStartError`` on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(headers=self.auth_headers, timeout=2.0) as client:
            while True:
                if self._proc is None or self._proc.poll() is not None:
                    code = None if self._proc is None else self._proc.returncode
                    raise ServerStartError(f"server exited with {code}:\n{self.log_tail()}")
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"server not healthy after {timeout_s:.0f}s:\n{self.log_tail()}",
                        timed_out=True,
                    )
                time.sleep(0.1)

    @property
    def auth_headers(self) -> dict[str, str]:
        """The headers a request to this server needs (the bearer token, if any)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def log_tail(self, chars: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL. Idempotent."""
        if self._proc is not None:
            terminate(self._proc, grace_s)
        if self._finalizer is not None:
            self._finalizer.detach()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL now (simulates a crash)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
