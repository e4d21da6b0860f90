"""Run an untrusted Python program: a separate process with no network and hard limits.

The program runs as ``python -I -B main.py`` in a fresh scratch directory (its cwd,
removed afterwards), started through util-linux ``unshare``:

* a new mount namespace in which the scratch directory is mounted over ``/tmp``,
  ``/var/tmp`` and ``/dev/shm`` (the world-writable folders): what the program
  writes there lands in its scratch dir and goes with it;
* a new network namespace (``--net``: only a loopback device that is down, so no
  socket reaches anything, the host's 127.0.0.1 included) and a new PID namespace
  (``--pid --fork --kill-child``: when the sandbox's first process dies, the kernel
  kills every process left in it, a fork bomb's children included);
* as root, the program runs as user/group ``nobody`` (``setpriv``, no new
  privileges, no supplementary groups): it cannot read a 0600 file of root or write
  where only root may; not as root, an unprivileged user namespace maps the caller
  to root inside (``--user --map-root-user``) and the caller's own rights apply;
* rlimits (util-linux ``prlimit``): CPU seconds, address space, the
  size of a file it writes (its stdout/stderr files included), number of processes;
* a wall-clock timeout, then SIGKILL to the whole process group.

The process-count limit counts every process of the sandbox user on the machine
(``nobody`` is shared by all sandboxes there): a fork bomb that fills it makes
the other sandboxes of that moment fail to start (their tests fail) until it is
killed, at most ``wall_s`` later.

If the namespaces cannot be made here, ``SandboxUnavailable`` says what is
missing; the program is never run unsandboxed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from nexrl.core.errors import NexrlError

__all__ = ["SandboxLimits", "SandboxResult", "SandboxUnavailable", "run_sandboxed"]

NOBODY = 65534  # uid and gid of nobody/nogroup
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxUnavailable(NexrlError, RuntimeError):
    """The sandbox cannot be made on this machine (what is missing is in the message)."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: float = 2.0
    memory_mb: int = 512
    file_size_kb: int = 1024
    nproc: int = 32
    wall_s: float = 5.0


@dataclass(frozen=True)
class SandboxResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


# Runs inside the new namespaces, as root there: the scratch dir ($1) is mounted over
# the world-writable folders (/tmp last: $1 lies under it), then the program starts in it.
MOUNT_SCRATCH = (
    'set -e; s="$1"; shift; mount --make-rprivate /; '
    'for d in /dev/shm /var/tmp /tmp; do if [ -d "$d" ]; then mount --bind "$s" "$d"; fi; done; '
    'cd /tmp; exec "$@"'
)


def _command(scratch: str, exe: str) -> list[str]:
    """``unshare ... sh -c MOUNT_SCRATCH`` then (as root) ``setpriv`` to nobody, then
    ``exe -I -B``: the program's file follows."""
    spaces = ["--mount", "--net", "--pid", "--fork", "--kill-child"]
    if os.geteuid() == 0:
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                "--no-new-privs", "--"]  # fmt: skip
        unshare = ["unshare", *spaces]
    else:
        drop = []
        unshare = ["unshare", "--user", "--map-root-user", *spaces]
    return [*unshare, "--", "/bin/sh", "-c", MOUNT_SCRATCH, "sh", scratch, *drop, exe, "-I", "-B"]


@functools.cache
def sandbox_python(python: str) -> str:
    """The interpreter ``python`` names, checked once per process by running
    ``python -c pass`` in the sandbox; ``SandboxUnavailable`` naming what is missing."""
    tools = ["prlimit", "unshare", *(["setpriv"] if os.geteuid() == 0 else [])]
    for tool in tools:
        if shutil.which(tool, path=SAFE_PATH) is None:
            raise SandboxUnavailable(
                f"code_execution sandbox: '{tool}' (util-linux) not found in {SAFE_PATH}; "
                "it is needed for the namespaces, the limits and the drop to nobody"
            )
    exe = shutil.which(python, path=SAFE_PATH) if "/" not in python else python
    if exe is None:
        raise SandboxUnavailable(
            f"code_execution sandbox: python '{python}' not found in {SAFE_PATH}"
        )
    scratch = _scratch()
    argv = [*_limits(SandboxLimits()), *_command(str(scratch), exe), "-c", "pass"]
    try:
        probe = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"code_execution sandbox: {argv[0]} failed: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if probe.returncode != 0:
        why = " ".join(probe.stderr.split())[:300]
        need = "root" if os.geteuid() == 0 else "unprivileged user namespaces"
        raise SandboxUnavailable(
            f"code_execution sandbox: cannot run '{exe}' in new mount, network and PID "
            f"namespaces: {why or f'exit {probe.returncode}'}; it needs util-linux unshare "
            f"and {need}, and '{exe}' readable by the sandbox user"
        )
    return exe


def _scratch() -> Path:
    scratch = Path(tempfile.mkdtemp(prefix="nexrl-sandbox-"))
    if os.geteuid() == 0:
        os.chown(scratch, NOBODY, NOBODY)
    os.chmod(scratch, 0o700)
    return scratch


def _env() -> dict[str, str]:
    return {"PATH": SAFE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}


def _limits(limits: SandboxLimits) -> list[str]:
    """util-linux ``prlimit`` setting the rlimits on the command it runs (no ``preexec_fn``:
    evaluators run in threaded Dask workers)."""
    cpu = max(1, int(limits.cpu_s + 0.999))
    mem = limits.memory_mb * 1024 * 1024
    size = limits.file_size_kb * 1024
    return ["prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={mem}", f"--fsize={size}",
            f"--nproc={limits.nproc}", "--core=0", "--"]  # fmt: skip


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the sandbox's first process (the PID namespace's init: the kernel then
    kills the rest, and ``unshare`` returns once they are all reaped), then the whole
    process group, and reap ``unshare``."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(f: IO[bytes], limit: int) -> str:
    f.seek(0)
    return f.read(limit).decode(errors="replace")


def run_sandboxed(
    program: str, stdin: str = "", limits: SandboxLimits | None = None, python: str = "python3"
) -> SandboxResult:
    """Run ``program`` with ``stdin`` in the sandbox (module doc); its exit, output and
    whether the wall-clock timeout killed it."""
    limits = limits or SandboxLimits()
    exe = sandbox_python(python)
    scratch = _scratch()
    try:
        main = scratch / "main.py"
        main.write_text(program)
        if os.geteuid() == 0:
            os.chown(main, NOBODY, NOBODY)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [*_limits(limits), *_command(str(scratch), exe), "main.py"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=scratch,
                env=_env(),
                start_new_session=True,
                close_fds=True,
            )
            timed_out = False
            try:
                proc.communicate(stdin.encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill(proc)
            limit = limits.file_size_kb * 1024
            return SandboxResult(proc.returncode, _read(out, limit), _read(err, limit), timed_out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
