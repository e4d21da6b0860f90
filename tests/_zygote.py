"""The test suite's launcher for ``python -m nexrl.driver.cli.train``: a process that
imports what a run imports once, then forks one child per command (``tests._launch``).

Started by ``tests._launch`` (``python -m tests._zygote SOCKET``), once per pytest
process, with the environment the tests give the command. A fresh ``nexrl train``
spends ~17 of its ~22 s of CPU (a 4-step run, 2-core VM) importing torch,
transformers, Dask and the rest in the driver, its warm parent and its workers; a
child of this process has them imported already, and so have the warm parent it
forks and the workers that one forks (~4 s for the same run).

Each request (a ``SOCK_SEQPACKET`` message: JSON with the arguments, environment,
working directory and session, and three file descriptors for stdin, stdout and
stderr) gets a child that becomes the command: its own stdio, environment,
working directory, ``sys.argv`` and ``__main__`` (``runpy``, as ``python -m``),
Dask's configuration read again from that environment, the default signal
handlers; then ``nexrl.driver.cli.train`` runs as ``__main__``. The reply is the
child's pid, then its exit code (negative: the signal that ended it) once it has
ended. This process exits when its stdin closes (the pytest process ended).

This is a test harness, not a product path: what a fresh interpreter does at start
(``sitecustomize``, ``PYTHON*`` variables) only happens here at this process's own
start, so ``tests._launch`` runs a command fresh whenever such a setting differs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any

#: What a run's driver, its warm parent and its workers import (none of them is
#: ``nexrl.driver.cli.train`` itself: runpy runs that as ``__main__`` in each child).
PRELOAD = (
    "nexrl.core.process.forkserver",
    "distributed",
    "distributed.dashboard.scheduler",
    "torch",
    "transformers",
    "transformers.models.auto.tokenization_auto",
    "transformers.modeling_utils",
    "transformers.models.qwen2.modeling_qwen2",
    "openai",
    "zarr",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "hydra",
    "omegaconf",
    "nexrl.driver.recipe",
    "nexrl.driver.controller",
)

CLI_MODULE = "nexrl.driver.cli.train"
MAX_MESSAGE = 1 << 20


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """Become the command (never returns)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request["new_session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        import dask.config

        dask.config.refresh()
        stdout: Any = sys.stdout
        stdout.reconfigure(line_buffering=os.isatty(1))
        sys.argv = [CLI_MODULE, *request["args"]]
        import runpy

        runpy.run_module(CLI_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # what a fresh interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_r, False)
    os.set_blocking(sig_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(sig_w)
    print("ready", flush=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    selector.register(sig_r, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that asked for it
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not sys.stdin.buffer.read1(1 << 16):  # type: ignore[union-attr]
                    return  # the pytest process has ended
            elif key.fileobj == sig_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(sig_r, 1 << 16)
                _reap(waiting)
            else:
                conn, _ = listener.accept()
                try:
                    data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
                    request = json.loads(data)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    os.close(sig_r)
                    os.close(sig_w)
                    for other in waiting.values():
                        other.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                waiting[pid] = conn
                with contextlib.suppress(OSError):
                    conn.send(json.dumps({"pid": pid}).encode())
        _reap(waiting)


def _reap(waiting: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
