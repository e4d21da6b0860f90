"""What DeepSpeed prints while joining the process group goes to the log, not stdout: a
trainer actor's buffered stdout reached the terminal after the run's summary."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
logging.getLogger("backends").setLevel(logging.INFO)
from backends.training.deepspeed_engine import init_distributed
print(init_distributed())
import deepspeed.ops
print(deepspeed.ops.__compatible_ops__.get("deepspeed_shm_comm", False), file=sys.stderr)
"""


def test_deepspeed_build_line_is_logged_not_printed() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DS_ACCELERATOR": "cpu"}
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "(0, 1, 0)\n"  # nothing of DeepSpeed's
    if proc.stderr.strip().splitlines()[-1] == "True":  # the shm comm op is built here
        assert (
            "backends.training.deepspeed_engine: deepspeed: DeepSpeed "
            "deepspeed.ops.comm.deepspeed_shm_comm_op built successfully"
        ) in proc.stderr
