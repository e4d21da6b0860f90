"""A warm parent for a local run's processes: import torch and transformers once.

A run on ``cluster.type: local`` starts three Python processes besides the driver:
two Dask workers (one hosts the trainer actor) and the embedded inference server.
Started fresh, the trainer's worker and the server each import torch and
transformers' model code, ~6 s of CPU each on a 2-core machine, one after the
other's core is free, while the first seconds of a run (the driver importing,
checking the recipe, loading data) leave the second core idle.

``start_warm_parent`` starts Python's ``forkserver`` (``multiprocessing``) at the
start of ``nexrl train`` (``nexrl.driver.cli.train.warm_parent_for``: a recipe that runs on
a local cluster with ``cluster.warm_parent`` on), with the heavy modules in its
preload list. ``nexrl train`` forks it from the driver once the driver has imported
what it needs itself (``SHARED_WITH_DRIVER``: torch, transformers, Dask), so those are
imported once; the warm parent then imports the rest (HF model code, openai) on the
idle core while the driver checks the recipe. Elsewhere (a test's process, which runs
threads) it is started fresh and imports all of them. Every local Dask worker
(``distributed.worker.multiprocessing-method: forkserver``, set here) and the
embedded server (``backends.inference.embedded.launch``, through
``warm_context``) is then forked from it with those modules already imported.
Measured on the 2-core VM: docs/benchmarks.md, "Start-up: a warm parent".

What a forked process gets:

* the modules in ``PRELOAD`` imported, no torch threads started and no CUDA
  context (neither is created by importing; a process forked after either would
  be unsafe), no other thread of the driver (the forkserver is its own process);
* the environment the driver had when the warm parent started, plus what Dask's
  nanny puts into a new worker's environment (``distributed.nanny.pre-spawn-environ``
  with nexrl's change, ``nexrl.core.process.worker_env``): those variables are set
  here before the warm parent starts, as the nanny would set them before spawning;
  a Dask worker also gets what the driver set or changed since (``changed_environ``,
  through its nanny's ``env``), as a spawned worker would inherit it;
* the driver's ``sys.path`` (how ``multiprocessing`` starts a forkserver), so
  recipe files and plugins resolve as in a spawned worker;
* a session of the warm parent's own (``nexrl.core.process.own_session``, first in the
  preload): a Ctrl-C in the terminal reaches the driver only.

The warm parent exits when the driver does (``multiprocessing`` closes its pipe);
the embedded server forked from it watches it (``--parent-pid``) and exits too.
Only a local cluster uses it: on Slurm, Kubernetes or ``cluster.type: address``
the workers are started by their jobs. ``cluster.warm_parent: false`` turns it off
(every process spawned fresh, as before). In ``ps`` the forked processes show the
driver's command line (they are forks of it; a warm parent started fresh shows
``python -c from multiprocessing.forkserver import main ...``);
``<run>/cluster.json`` and the log lines name their pids.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.core.process.own_session import OWN_SESSION_VAR, leave_terminal_session

__all__ = [
    "PRELOAD",
    "changed_environ",
    "start_warm_parent",
    "stop_warm_parent",
    "warm_context",
]

logger = logging.getLogger(__name__)

#: Imported once in the warm parent; every process forked from it has them.
#: ``transformers.modeling_utils`` is the bulk of any HF model's import (the
#: architecture's own module adds little); no backend (DeepSpeed) here, so that
#: importing one never happens before the recipe names it.
PRELOAD: tuple[str, ...] = (
    "nexrl.core.process.own_session",  # first: out of the terminal's session (Ctrl-C)
    "distributed",
    "torch",
    "transformers.modeling_utils",
    "transformers.models.qwen2.modeling_qwen2",
    "openai",
)

#: What ``nexrl train``'s driver imports for its own work: imported there before the
#: warm parent is forked from it (``start_warm_parent(fork=True)``), so only the rest
#: of ``PRELOAD`` (HF model code, openai: ~4 s of CPU) is imported in the warm parent.
SHARED_WITH_DRIVER: tuple[str, ...] = ("distributed", "torch", "transformers")

_context: Any = None  # the forkserver context once started by this process
_method_before = "spawn"  # Dask's multiprocessing method before start_warm_parent
_pid: int | None = None  # the warm parent's (multiprocessing starts another if it dies)
_environ: dict[str, str] = {}  # the environment the warm parent started with


def _worker_environ() -> dict[str, str]:
    """The variables Dask's nanny sets before it starts a worker (its
    ``pre-spawn-environ`` after nexrl's change, and the hash seed it pins)."""
    import dask.config

    raw = dask.config.get("distributed.nanny.pre-spawn-environ") or {}
    env = {str(k): str(v) for k, v in raw.items() if v is not None}
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # Dask's own choice, so workers hash alike
    env[OWN_SESSION_VAR] = "1"  # read (and removed) by the first preload module
    return env


def start_warm_parent(preload: Sequence[str] = PRELOAD, *, fork: bool = False) -> bool:
    """Start the warm parent (once per process) and make local Dask workers fork from
    it; False (and nothing changed) where it cannot start.

    ``fork``: the warm parent is forked from this process once it has imported
    ``SHARED_WITH_DRIVER`` itself (``nexrl train``'s driver needs those anyway), so
    those are imported once, not twice; where this process already runs other Python
    threads (a fork would copy their locks, not them) it is started fresh instead."""
    global _context
    if _context is not None:
        return True
    import multiprocessing
    from multiprocessing import forkserver

    import dask.config

    from nexrl.core.process.worker_env import apply_in_driver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    apply_in_driver()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    saved = dict(os.environ)
    os.environ.update(_worker_environ())  # what the warm parent starts with, not this process
    started_with = dict(os.environ)
    try:
        if not (fork and _fork_warm_parent(preload)):
            forkserver.ensure_running()
    except OSError as exc:
        logger.warning("warm parent not started (%s): processes start fresh", exc)
        return False
    finally:
        os.environ.clear()
        os.environ.update(saved)
    global _method_before, _pid, _environ
    _environ = started_with
    _method_before = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    _keep_our_preload()
    _context = ctx
    _pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    return True


def _fork_warm_parent(preload: Sequence[str]) -> bool:
    """Start the warm parent as a fork of this process, as ``ForkServer.ensure_running``
    starts it fresh (its listening socket and "alive" pipe, then ``forkserver.main``),
    with ``SHARED_WITH_DRIVER`` imported here first. Call with the worker environment
    in ``os.environ``. False (nothing started) where this process runs other threads.

    Measured: docs/benchmarks.md, "Start-up: a warm parent"."""
    import importlib
    import socket
    import threading
    from multiprocessing import connection, forkserver, resource_tracker

    for name in SHARED_WITH_DRIVER:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if threading.active_count() != 1:
        return False
    server: Any = forkserver._forkserver  # private: Python has no public way to seed it
    resource_tracker.ensure_running()  # its fd is inherited, as ensure_running does
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(alive_r)
            os.close(alive_w)
            raise
        if pid == 0:  # the warm parent: serve forks until the driver's end of the pipe closes
            try:
                os.close(alive_w)
                os.environ.pop(OWN_SESSION_VAR, None)
                leave_terminal_session()
                forkserver.main(listener.fileno(), alive_r, list(preload))  # ends in SystemExit
            finally:
                os._exit(0)  # not the driver's atexit hooks: they are the driver's
        os.close(alive_r)
    with server._lock:
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
    return True


def _keep_our_preload() -> None:
    """Dask, on its first use of a forkserver context, imports numpy, pandas and the
    rest of its packages in *this* process to preload them (``get_mp_context``): here
    the warm parent is already running with ours, so that would only cost the driver."""
    try:
        import distributed.utils as dask_utils

        if hasattr(dask_utils, "_forkserver_preload_set"):
            dask_utils._forkserver_preload_set = True
    except ImportError:  # pragma: no cover - distributed is a dependency
        pass


def changed_environ() -> dict[str, str]:
    """The variables this process has set (or changed) since it started the warm parent:
    a local worker forked from it gets them from its nanny (``env``), so that it sees
    the driver's environment as a spawned worker would. ``{}`` without a warm parent."""
    if _context is None:
        return {}
    return {k: v for k, v in os.environ.items() if _environ.get(k) != v}


def warm_context() -> Any:
    """The ``multiprocessing`` forkserver context when this process started the warm
    parent, else None."""
    return _context


def warm_parent_lost() -> str:
    """A clause for a run's error line when the warm parent this process started has
    died (killed, out of memory): the workers and the server forked from it end with
    it, so the rank or server the error names is not the cause. "" otherwise."""
    pid = _pid
    if _context is None or not pid:
        return ""
    try:  # our child: once dead it is a zombie until reaped, so read its state
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = "gone"
    if state not in ("Z", "X", "gone"):
        return ""
    return (
        f"; the warm parent (pid {pid}) that this run's local workers and inference server "
        "fork from had died (killed? out of memory?) and took them with it "
        "(cluster.warm_parent=false starts each process on its own)"
    )


def stop_warm_parent() -> None:
    """Stop the warm parent this process started, when the recipe's check failed or the
    run is over: it may still be importing, so it is killed, not asked (a forked
    process it started is not its to wait for: the workers close with the cluster, the
    server with its supervisor)."""
    global _context, _pid
    if _context is None:
        return
    from multiprocessing import forkserver

    import dask.config

    server: Any = forkserver._forkserver  # private: Python has no public stop
    pid = getattr(server, "_forkserver_pid", None)
    if pid:
        import signal

        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        server._stop()  # reaps it and forgets it: a later start begins afresh
    dask.config.set({"distributed.worker.multiprocessing-method": _method_before})
    _context = None
    _pid = None
    _environ.clear()


def detach_from_warm_parent() -> None:
    """In a process forked from the warm parent that outlives what it serves (the
    embedded server): give up its copy of the warm parent's "alive" pipe.
    ``multiprocessing`` hands that pipe to every forked child (so that the child may
    start processes through the same warm parent), and the warm parent exits only
    once no process holds it; the server exits when its parent, the warm parent, is
    gone (``--parent-pid``), so holding the pipe would keep both alive after the
    driver was killed."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # private: Python has no public stop
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None
