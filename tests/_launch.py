"""``subprocess.run`` / ``subprocess.Popen`` for the tests' ``nexrl train`` commands,
forked from a process that has the run's imports done (``tests._zygote``).

A command ``[sys.executable, "-m", "nexrl.driver.cli.train", ...]`` is a child of the
zygote (one per pytest process, started on first use) with the given environment,
working directory, stdio and session; everything else (and a CLI command whose
start-up settings differ from the zygote's: ``PYTHON*`` variables such as a
``sitecustomize`` on ``PYTHONPATH``, ``HF_*``, allocator and thread variables, or
``NEXRL_TEST_FRESH=1``) runs through ``subprocess`` as it is. The returned object
has the parts of ``Popen`` the tests use: ``pid``, ``args``, ``stdout``/``stderr``
pipes, ``poll``, ``wait``, ``communicate``, ``send_signal``, ``terminate``, ``kill``,
``returncode`` (negative for a signal), and ``with``.

What it changes is how the command's process is born (a fork of a warm process,
not a fresh interpreter); the run itself is the same code. The fresh start is
still tested by .ci/cold (``./pants run``), tests/build and the wheel test, and by
the tests that need a fresh interpreter (a pseudo-terminal, ``sitecustomize``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Popen", "run"]

CLI = ("-m", "nexrl.driver.cli.train")
#: Read by a fresh interpreter (or a module it preloads) at start: a command whose
#: values differ from the zygote's runs fresh.
STARTUP_PREFIXES = (
    "PYTHON",
    "HF_",
    "TRANSFORMERS_",
    "HUGGINGFACE_",
    "TORCH",
    "MALLOC_",
    "LD_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "NEXRL_TEST_FRESH",
)

_zygote: subprocess.Popen[bytes] | None = None
_zygote_env: dict[str, str] = {}
_socket_path = ""


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


def _base_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DS_ACCELERATOR": "cpu"}


def _start_zygote() -> bool:
    global _zygote, _zygote_env, _socket_path
    if _zygote is not None:
        return _zygote.poll() is None
    folder = tempfile.mkdtemp(prefix="nexrl-zygote-")
    _socket_path = os.path.join(folder, "s")
    _zygote_env = _base_env()
    log = open(os.path.join(folder, "zygote.log"), "wb")  # noqa: SIM115 - lives with it
    _zygote = subprocess.Popen(
        [sys.executable, "-m", "tests._zygote", _socket_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=_zygote_env,
        start_new_session=True,  # a test's Ctrl-C or killpg is not for it
    )
    atexit.register(_stop_zygote)
    assert _zygote.stdout is not None
    ready = _zygote.stdout.readline()
    if ready.strip() != b"ready":
        _zygote.kill()
        return False
    return True


def _stop_zygote() -> None:
    if _zygote is not None and _zygote.poll() is None:
        assert _zygote.stdin is not None
        with contextlib.suppress(OSError):
            _zygote.stdin.close()
        try:
            _zygote.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _zygote.kill()


def _forkable(args: Sequence[Any], env: Mapping[str, str] | None, kwargs: dict[str, Any]) -> bool:
    if len(args) < 3 or str(args[0]) != sys.executable or tuple(map(str, args[1:3])) != CLI:
        return False
    if set(kwargs) - {"stdin", "stdout", "stderr", "text", "cwd", "start_new_session"}:
        return False
    if env is None:
        env = os.environ
    if env.get("NEXRL_TEST_FRESH") == "1":
        return False
    return _start_zygote() and _startup(env) == _startup(_zygote_env)


def Popen(args: Sequence[Any], *, env: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
    """``subprocess.Popen(args, ...)``, forked from the zygote where ``args`` is
    ``nexrl train`` (see the module's docstring)."""
    if not _forkable(args, env, kwargs):
        return subprocess.Popen(args, env=env, **kwargs)
    return ForkedCommand([str(a) for a in args], dict(os.environ if env is None else env), **kwargs)


def run(
    args: Sequence[Any],
    *,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    input: str | bytes | None = None,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, ...)``, forked from the zygote where ``args`` is ``nexrl
    train`` (see the module's docstring)."""
    forked = {k: v for k, v in kwargs.items() if k != "env"}
    for name in ("stdout", "stderr", "stdin"):
        if capture_output or input is not None:
            forked.setdefault(name, None)
    if not _forkable(args, kwargs.get("env"), forked):
        return subprocess.run(
            args, capture_output=capture_output, timeout=timeout, check=check, input=input, **kwargs
        )
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


class ForkedCommand:
    """A ``nexrl train`` command forked from the zygote: the parts of ``Popen`` tests use."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        cwd: str | os.PathLike[str] | None = None,
        start_new_session: bool = False,
    ) -> None:
        self.args = args
        self.returncode: int | None = None
        self._text = text
        self.stdin: Any = None
        self.stdout: Any = None
        self.stderr: Any = None
        theirs: list[int] = []  # fds to send, closed here once sent
        ours: list[int] = []  # fds of ours that stand for one of theirs (not closed)
        in_fd = self._fd(stdin, 0, "stdin", theirs, ours)
        out_fd = self._fd(stdout, 1, "stdout", theirs, ours)
        err_fd = (
            out_fd if stderr == subprocess.STDOUT else self._fd(stderr, 2, "stderr", theirs, ours)
        )
        request = {
            "args": args[3:],
            "env": env,
            "cwd": str(Path(cwd).resolve()) if cwd is not None else os.getcwd(),
            "new_session": bool(start_new_session),
        }
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._conn.connect(_socket_path)
            socket.send_fds(self._conn, [json.dumps(request).encode()], [in_fd, out_fd, err_fd])
            reply = json.loads(self._conn.recv(1 << 16) or b"{}")
        finally:
            for fd in theirs:
                os.close(fd)
        if "pid" not in reply:
            raise OSError(f"the test zygote did not start {args[3:]} (see its log)")
        self.pid: int = reply["pid"]

    def _fd(self, spec: Any, own: int, name: str, theirs: list[int], ours: list[int]) -> int:
        if spec is None:
            return own
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            theirs.append(fd)
            return fd
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            if name == "stdin":
                self.stdin = open(w, "w" if self._text else "wb")  # noqa: SIM115
                theirs.append(r)
                return r
            setattr(self, name, open(r, "r" if self._text else "rb"))  # noqa: SIM115
            theirs.append(w)
            return w
        if isinstance(spec, int):
            return spec
        return int(spec.fileno())

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_exit(0)
        return self.returncode

    def _read_exit(self, timeout: float | None) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._conn, selectors.EVENT_READ)
            if not sel.select(timeout):
                return
        data = self._conn.recv(1 << 16)
        self.returncode = int(json.loads(data)["exit"]) if data else -9
        self._conn.close()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_exit(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(
        self, input: str | bytes | None = None, timeout: float | None = None
    ) -> tuple[Any, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            self.stdin = None
        chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        with selectors.DefaultSelector() as sel:
            for name in chunks:
                stream = getattr(self, name)
                if stream is not None:
                    sel.register(stream.fileno(), selectors.EVENT_READ, name)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        sel.unregister(key.fd)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        out: list[Any] = []
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is None:
                out.append(None)
                continue
            stream.close()
            raw = b"".join(chunks[name])
            out.append(raw.decode(errors="replace") if self._text else raw)
        return out[0], out[1]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> ForkedCommand:
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("stdin", "stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self.returncode is None:
            self.wait()
