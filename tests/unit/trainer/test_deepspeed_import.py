"""A trainer rank imports DeepSpeed without the mlflow import of DeepSpeed's autotuner
(~2 s of CPU at every rank's start: nexrl never autotunes); mlflow stays importable."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import sys
from backends.trainer.deepspeed_engine import import_deepspeed
ds = import_deepspeed()
import deepspeed.autotuning.autotuner as autotuner
skipped = "mlflow" not in sys.modules and autotuner.has_mlflow is False
import mlflow  # another importer (nexrl's MLflow sink) is not refused
print(skipped, ds is sys.modules["deepspeed"], mlflow.__name__)
"""


def test_deepspeed_imports_without_mlflow_and_mlflow_still_imports() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "DS_ACCELERATOR": "cpu"},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-3:] == ["True", "True", "mlflow"], proc.stdout
