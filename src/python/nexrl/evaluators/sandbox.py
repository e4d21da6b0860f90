"""Run an untrusted Python program: a separate process with no network and hard limits.

The program runs as ``python -I -B main.py`` in a fresh scratch directory (its cwd and
$HOME, removed afterwards), started through util-linux ``unshare``:

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

from nexrl.errors import NexrlError

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


def _prefix() -> list[str]:
    if os.geteuid() == 0:
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--", *drop,
                "--no-new-privs", "--"]  # fmt: skip
    return ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
            "--"]  # fmt: skip


@functools.cache
def sandbox_python(python: str) -> list[str]:
    """The command line that runs ``python`` in the sandbox, checked once per process by
    running ``python -c pass`` in it; ``SandboxUnavailable`` naming what is missing."""
    prefix = _prefix()
    for tool in ("prlimit", *(t for t in ("unshare", "setpriv") if t in prefix)):
        if shutil.which(tool, path=SAFE_PATH) is None:
            raise SandboxUnavailable(
                f"code_execution sandbox: '{tool}' (util-linux) not found in {SAFE_PATH}; "
                "it is needed for the network namespace and the drop to nobody"
            )
    exe = shutil.which(python, path=SAFE_PATH) if "/" not in python else python
    if exe is None:
        raise SandboxUnavailable(
            f"code_execution sandbox: python '{python}' not found in {SAFE_PATH}"
        )
    argv = [*prefix, exe, "-I", "-B"]
    try:
        probe = subprocess.run(
            [*_limits(SandboxLimits()), *argv, "-c", "pass"],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env("/"),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"code_execution sandbox: {argv[0]} failed: {exc}") from None
    if probe.returncode != 0:
        why = " ".join(probe.stderr.split())[:300]
        need = "root" if os.geteuid() == 0 else "unprivileged user namespaces"
        raise SandboxUnavailable(
            f"code_execution sandbox: cannot run '{exe}' in a network+PID namespace "
            f"({' '.join(prefix[:-1])}): {why or f'exit {probe.returncode}'}; it needs "
            f"util-linux unshare and {need}, and '{exe}' readable by the sandbox user"
        )
    return argv


def _env(home: str) -> dict[str, str]:
    return {"PATH": SAFE_PATH, "HOME": home, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}


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


def _read(f: object, limit: int) -> str:
    f.seek(0)  # type: ignore[attr-defined]
    return f.read(limit).decode(errors="replace")  # type: ignore[attr-defined]


def run_sandboxed(
    program: str, stdin: str = "", limits: SandboxLimits | None = None, python: str = "python3"
) -> SandboxResult:
    """Run ``program`` with ``stdin`` in the sandbox (module doc); its exit, output and
    whether the wall-clock timeout killed it."""
    limits = limits or SandboxLimits()
    argv = sandbox_python(python)
    scratch = Path(tempfile.mkdtemp(prefix="nexrl-sandbox-"))
    try:
        main = scratch / "main.py"
        main.write_text(program)
        if os.geteuid() == 0:
            for p in (scratch, main):
                os.chown(p, NOBODY, NOBODY)
        os.chmod(scratch, 0o700)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [*_limits(limits), *argv, "main.py"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=scratch,
                env=_env(str(scratch)),
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
