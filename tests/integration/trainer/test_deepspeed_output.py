"""DeepSpeed's start-up on a CPU: what it prints goes to the log, not stdout (a trainer
actor's buffered stdout reached the terminal after the run's summary), a single rank
compiles nothing, and JIT-compiled ops are cached per Python environment."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging, os, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
logging.getLogger("backends").setLevel(logging.INFO)
from backends.trainer.deepspeed_engine import init_distributed
print(init_distributed())
print("TORCH_EXTENSIONS_DIR=" + os.environ["TORCH_EXTENSIONS_DIR"], file=sys.stderr)
"""


def run(tmp_path: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DS_ACCELERATOR": "cpu"}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # a rank an earlier test in this process set up: not ours
    env.pop("TORCH_EXTENSIONS_DIR", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env.update(extra_env)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_single_cpu_rank_joins_without_compiling_or_printing(tmp_path: Path) -> None:
    """One rank has no all-reduce to speed up: DeepSpeed's shared-memory comm op (a
    C++ build of minutes on a new 2-core machine) is not built, nothing is printed."""
    proc = run(tmp_path)
    assert proc.stdout == "(0, 1, 0)\n"  # nothing of DeepSpeed's
    assert "built successfully" not in proc.stderr
    ext = Path(proc.stderr.split("TORCH_EXTENSIONS_DIR=")[1].splitlines()[0])
    assert not (ext.exists() and any(ext.iterdir())), list(ext.iterdir())


def test_jit_ops_are_cached_per_python_environment(tmp_path: Path) -> None:
    """Two environments (e.g. `./pants run`'s and `./pants test`'s) do not share one
    build folder (each would rebuild the other's op, minutes each time); a folder the
    user set is kept."""
    import torch

    proc = run(tmp_path)
    ext = proc.stderr.split("TORCH_EXTENSIONS_DIR=")[1].splitlines()[0]
    key = hashlib.sha256(os.path.dirname(torch.__file__).encode()).hexdigest()[:12]
    assert ext == str(tmp_path / "cache" / "torch_extensions" / f"nexrl-{torch.__version__}-{key}")
    mine = str(tmp_path / "mine")
    proc = run(tmp_path, TORCH_EXTENSIONS_DIR=mine)
    assert f"TORCH_EXTENSIONS_DIR={mine}\n" in proc.stderr
