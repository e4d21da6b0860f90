"""A custom rollout worker that fails on every group: the run stops with one error line
naming the limit, and the terminal shows each kind of failure once, then counts.

Before the folding, every failed group printed two driver lines (the failed future,
the retry), for every try: some 50 lines before the run stopped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, read_rows, subprocess_env

WORKER = """
from nexrl.rollout.worker.simple import SimpleRolloutWorker


class Broken(SimpleRolloutWorker):  # a bug of the kind a new worker has
    async def run_agent(self, item):
        return item["no_such_field"]


class BrokenOnFlagged(SimpleRolloutWorker):  # fails on the rows that say so
    async def run_agent(self, item):
        if item["data_item"].get("fail"):
            raise RuntimeError("this row fails")
        return await super().run_agent(item)
"""


def _train(
    tmp_path: Path, worker_class: str, *extra: str, steps: int = 3
) -> subprocess.CompletedProcess[str]:
    """The default recipe through the CLI with a worker class of ``WORKER``; the run
    folder is ``tmp_path / "run"``."""
    worker = tmp_path / "broken_worker.py"
    worker.write_text(WORKER)
    worker_override = f"rollout_worker.custom_worker={worker}:{worker_class}"
    command = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *overrides(tmp_path / "run", worker_override, *extra, steps=steps),
    ]
    return _launch.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)


def test_a_worker_that_fails_every_group_stops_the_run_in_a_few_lines(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _train(
        tmp_path,
        "Broken",
        # every failed try counts: of 31 tries at most 10 groups use up their 3, so at
        # least 21 are retried (at 12, a loaded machine with few groups in flight once
        # logged fewer than the 10 retries this test needs)
        "runtime_monitor.max_task_failures=30",
        "rollout_worker.retry_backoff_s=0.1",
        "rollout_worker.groups_per_task=1",  # a future per group
    )
    err = proc.stderr
    assert proc.returncode == 1, err[-3000:]
    (stop,) = [line for line in err.splitlines() if line.startswith("error: the run stopped")]
    found = re.search(
        r"the run stopped: (\d+) rollout groups failed \(limit runtime_monitor.max_task_failures=30\)",
        stop,
    )
    assert found and int(found.group(1)) > 30, stop  # (a harvest may take several at once)
    assert "KeyError: 'no_such_field'" in stop, stop
    # the driver's log has every failed future; the terminal the first, then the 10th
    log = (out / "logs" / "driver.log").read_text()
    logged = [x for x in log.splitlines() if "WARNING" in x and "rollout future rollout-g" in x]
    assert len(logged) >= int(found.group(1)), log[-3000:]  # (the last harvest: all logged)
    shown = [x for x in err.splitlines() if "nexrl.driver.controller.failures: rollout future" in x]
    assert len(shown) == 2, err[-3000:]
    where = f"{out}/logs/driver.log"
    assert shown[0].endswith(
        f"(shown once per kind, then counted at 10, 100, ...; details and repeats: {where})"
    )
    assert shown[1].endswith(
        f"(the same kind 10 times so far in this process; details and repeats: {where})"
    )
    # the retries: each in the log, the first of each kind on the terminal
    retried = [x for x in log.splitlines() if "rolled out again in" in x]
    assert len(retried) >= 10, log[-3000:]
    assert sum("rolled out again in" in x for x in err.splitlines()) == 2, err[-3000:]
    assert "Traceback" not in err


def test_failed_validation_prompts_are_counted_as_prompts(tmp_path: Path) -> None:
    """Validation sends its prompts 16 to a Dask task: 20 failing prompts are 2 failed
    tasks, and the line and ``val/failed_groups`` said 2."""
    out = tmp_path / "run"
    val = tmp_path / "val.jsonl"
    val.write_text(
        "".join(
            json.dumps({"prompt": f"max {i} 1 2", "answer": str(max(i, 2)), "fail": True}) + "\n"
            for i in range(20)
        )
    )
    proc = _train(
        tmp_path,
        "BrokenOnFlagged",
        f"validate.data_files=[{val}]",
        "validate.validate_before_train=true",
        steps=1,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("validation at step 0")]
    assert "(0 samples; 20 prompts failed: see logs/dask-worker-*.log)" in line, line
    (first,) = [r for r in read_rows(out) if r["step"] == 0]
    assert first["val/failed_groups"] == 20
