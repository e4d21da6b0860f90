"""Fault injection for end-to-end tests: SIGKILL this process at an exact point of a write.

Put this folder first on ``PYTHONPATH`` and set ``NEXRL_KILLPOINT`` to
``CALL|NEEDLE|N|FIRED[|SKIP]``: the ``N``-th call in a process of ``CALL`` (``replace``:
``os.replace``, ``rename``: ``os.rename``, ``link``: ``os.link``, ``open``: the
builtin ``open`` for writing, ``torch.save``: ``torch.save`` to a path, patched when
``torch.serialization`` is first imported, ``jsonl``: the driver's write of a metrics
row, whose path is ``<run>/metrics.jsonl#step=S``, ``vllm_update``: vLLM's copy of
one update from nexrl's weight-transfer engine, in vLLM's worker process, whose
path is ``receive_weights#version=V``; vLLM's server imports this file when this
folder is ``NEXRL_VLLM_PYTHONPATH``) whose path argument (any of them) contains ``NEEDLE``
(``*`` in it matches any run of characters) kills the process with ``SIGKILL``
before the call runs (not in a process that imported the module ``SKIP``: e.g.
``deepspeed`` spares the trainer's process): nothing after that point happens, as with a real ``kill -9``,
an OOM kill or a lost node. Every Python process of a run imports this file (the
driver, the Dask worker processes that hold the trainer and the rollouts, the
inference server), and only the one doing the write matches. The kill happens
once across all processes: the first to fire creates the file ``FIRED`` (with its
pid and the call) and others, and a resumed run, never fire again.

``NEXRL_SLOW_TRANSFER_S=S`` (with or without a kill point) makes every update vLLM's
worker takes from nexrl's weight-transfer engine start ``S`` seconds late, as a large
model's transfer would: requests that arrive meanwhile wait inside the update.

Only the test's own processes are touched; the code under test runs unchanged.
"""

from __future__ import annotations

import builtins
import fnmatch
import importlib.abc
import importlib.util
import os
import signal
import sys
from typing import Any

_SPEC = os.environ.get("NEXRL_KILLPOINT", "")


def _install(call: str, needle: str, nth: int, fired: str, skip: str) -> None:
    pattern = f"*{needle}*"
    seen = [0]

    def hit(*paths: Any) -> None:
        names = [os.fsdecode(p) for p in paths if isinstance(p, (str, bytes, os.PathLike))]
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            return
        if skip and skip in sys.modules:
            return
        seen[0] += 1
        if seen[0] != nth:
            return
        try:
            fd = os.open(fired, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # fired already (in another process, or in the run before a resume)
        os.write(fd, f"{os.getpid()} {call} {' '.join(names)}\n".encode())
        os.fsync(fd)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    if call in ("replace", "rename", "link"):
        original = getattr(os, call)

        def wrapped(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            hit(src, dst)
            return original(src, dst, *args, **kwargs)

        setattr(os, call, wrapped)
    elif call == "torch.save":

        def patch(module: Any) -> None:
            original_save = module.save

            def wrapped_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
                hit(f)
                return original_save(obj, f, *args, **kwargs)

            module.save = wrapped_save

        sys.meta_path.insert(0, _AfterImport("torch.serialization", patch))
    elif call == "jsonl":

        def patch_sink(module: Any) -> None:
            original_log = module.JsonlSink.log

            def wrapped_log(self: Any, step: int, metrics: Any) -> Any:
                hit(f"{self.path}#step={int(step)}")
                return original_log(self, step, metrics)

            module.JsonlSink.log = wrapped_log

        sys.meta_path.insert(0, _AfterImport("nexrl.driver.metrics.sinks", patch_sink))
    elif call == "vllm_update":
        _before_receive(lambda info: hit(f"receive_weights#version={int(info.version)}"))
    elif call == "open":
        original_open = builtins.open

        def wrapped_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(c in mode for c in "wax+"):
                hit(file)
            return original_open(file, mode, *args, **kwargs)

        builtins.open = wrapped_open
    else:
        raise ValueError(f"NEXRL_KILLPOINT: unknown call {call!r}")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after the module ``name`` is executed (before any
    ``from name import x`` that triggered the import reads from it)."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        exec_module = loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            then(module)

        loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


def _before_receive(before: Any) -> None:
    """``before(update_info)`` runs first in each ``NexrlShmEngine.receive_weights`` (vLLM's
    copy of an update's weights, in its worker process)."""

    def patch_engine(module: Any) -> None:
        original_receive = module.NexrlShmEngine.receive_weights

        def receive(self: Any, update_info: Any) -> Any:
            before(update_info)
            return original_receive(self, update_info)

        module.NexrlShmEngine.receive_weights = receive

    sys.meta_path.insert(0, _AfterImport("nexrl_vllm_plugin.engine", patch_engine))


if os.environ.get("NEXRL_SLOW_TRANSFER_S"):
    import time

    _delay = float(os.environ["NEXRL_SLOW_TRANSFER_S"])
    _before_receive(lambda info: time.sleep(_delay))
if _SPEC:
    _call, _needle, _nth, _fired, *_skip = _SPEC.split("|")
    _install(_call, _needle, int(_nth), _fired, _skip[0] if _skip else "")
