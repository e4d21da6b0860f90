"""The embedded server's process: spawned (``Popen`` on a thread that lives as long as
this process, so ``PR_SET_PDEATHSIG`` means "when this process dies") or forked from
the warm parent (``nexrl.core.process.forkserver``), and terminated with its process group.
``EmbeddedServer`` (``handle.py``) decides which and when."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["ForkedProcess", "die_with_parent", "fork_warm", "spawn", "terminate", "warm_context"]


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM this child when the thread that started it ends (the process's
    death ends every thread): see ``spawn``."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


_LAUNCHER: ThreadPoolExecutor | None = None
_LAUNCHER_LOCK = threading.Lock()


def warm_context() -> Any:
    """The warm parent's multiprocessing context, or None (``nexrl.core.process.forkserver``)."""
    from nexrl.core.process.forkserver import warm_context

    return warm_context()


def spawn(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``Popen`` on a thread that lives as long as this process. ``PR_SET_PDEATHSIG``
    fires when the *thread* that forked the child ends, not the process: a command
    started from a short-lived thread (the controller starts the server on one while
    the trainer sets up) was SIGTERMed seconds later when that thread finished."""
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None:
            _LAUNCHER = ThreadPoolExecutor(1, thread_name_prefix="nexrl-server-launcher")

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, **kwargs)

    return _LAUNCHER.submit(popen).result()


class ForkedProcess:
    """What ``EmbeddedServer`` uses of ``subprocess.Popen`` (``pid``, ``poll``, ``wait``,
    ``returncode``) for a server forked from the warm parent
    (``nexrl.core.process.forkserver``): a ``multiprocessing`` process."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # negative: killed by that signal, as Popen's

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"embedded server (pid {self.pid})", timeout or 0.0)
        return int(code)


def _serve_forked(
    args: list[str], sock: socket.socket, env: dict[str, str], log_path: str, watch: bool
) -> None:  # pragma: no cover - runs in the forked child
    """The server's process when forked from the warm parent: what ``Popen`` gives the
    spawned one (its own session, output to the log, the handle's environment), then
    the server's ``main``. Its parent is the warm parent, which exits with the driver:
    that is the parent it watches."""
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)
    import multiprocessing

    # a spawned server's default: a lock it makes (tqdm's) is not the warm parent's
    # resource tracker's to clean up when the server is stopped
    multiprocessing.set_start_method("fork", force=True)
    from nexrl.core.process.forkserver import detach_from_warm_parent

    detach_from_warm_parent()  # so that the warm parent exits with the driver
    from backends.inference.embedded.cli import main

    fd = os.dup(sock.fileno())  # the server owns this copy; ``sock`` may be collected
    main([*args, "--fd", str(fd), *(["--parent-pid", str(os.getppid())] if watch else [])])


def fork_warm(
    context: Any, args: list[str], sock: socket.socket, env: dict[str, str], log: Path, watch: bool
) -> ForkedProcess:
    process = context.Process(
        target=_serve_forked,
        args=(args, sock, env, str(log), watch),
        name="nexrl-embedded-server",
        # at this process's exit multiprocessing terminates a daemonic child (and
        # would wait for any other, forever, if the supervisor had not stopped it)
        daemon=True,
    )
    process.start()
    return ForkedProcess(process)


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to the server's process group, up to ``grace_s`` for its leader to
    exit, then SIGKILL to whatever of the group is left. The leader (vLLM's API
    server) may exit while its engine-core and worker processes are still on their
    way out, or outlive it (a kill -9 of the API server): none is left running."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the child's own group (start_new_session)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # the whole group is gone
    proc.wait(timeout=10)
