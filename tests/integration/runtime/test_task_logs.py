"""Task tracebacks (and warnings) of Dask workers go to the run's log files; the
terminal gets one line per distinct failure.

A real ``LocalCluster`` of worker processes in a child process whose stderr is the
"terminal" this test reads: the workers inherit it, as they inherit a user's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys
    from distributed import Client, LocalCluster, wait

    from nexrl.core.process.task_logs import install_task_logs, route_logs

    logs = sys.argv[1]

    def scored(i):  # an evaluator that raised is logged and scored 0 (the task succeeds)
        import logging

        logging.getLogger("nexrl.rollout.worker.base").warning(
            "evaluator NoAnswer failed: KeyError: 'answer'"
        )
        logging.getLogger("backends.trainer.deepspeed_engine").info("deepspeed: op built")
        return 0.0

    def evaluate(i):
        if i % 4 == 3:
            raise TypeError("Can't instantiate abstract class NoEvaluate without evaluate")
        raise KeyError("answer")

    if __name__ == "__main__":
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as cluster, Client(cluster) as client:
            restore = route_logs(f"{logs}/driver.log", shown_as="logs/driver.log")
            install_task_logs(client, logs)
            futures = [client.submit(evaluate, i, key=f"evaluate-g{i}-r0") for i in range(12)]
            wait(futures)
            assert all(f.status == "error" for f in futures)
            assert client.gather([client.submit(scored, i) for i in range(8)]) == [0.0] * 8
            restore()
        print("done", file=sys.stderr)
    """
)


def run_script(script: Path, text: str, logs: Path) -> subprocess.CompletedProcess[str]:
    """``text`` as ``script``, run in a child whose stderr is the "terminal" read here."""
    script.write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(script), str(logs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_failing_task_is_one_line_per_failure_on_the_terminal(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = run_script(tmp_path / "failing_tasks.py", SCRIPT, logs)
    assert proc.returncode == 0, proc.stderr
    terminal = proc.stderr.splitlines()
    assert terminal[-1] == "done"
    failures = [line for line in terminal if "Compute Failed" in line]
    # 12 failed tasks, 2 distinct failures, 2 workers: at most one line each per worker
    assert {("KeyError" in line, "TypeError" in line) for line in failures} == {
        (True, False),
        (False, True),
    }
    # one terminal line per distinct failure per worker that hit it (its log file says which)
    per_worker = [p.read_text() for p in sorted(logs.glob("dask-worker-*.log"))]
    # (the exception as Dask logs it: functions from a script's __main__ come without
    # source lines since cloudpickle 3.1.3, "<dynamic-code>")
    hit = [("KeyError('answer')" in t) + ("TypeError(" in t) for t in per_worker]
    assert len(failures) == sum(hit) >= 2, proc.stderr
    assert "Traceback" not in proc.stderr and "File " not in proc.stderr
    warned = [line for line in terminal if "evaluator NoAnswer failed" in line]
    # 8 warnings: one line per worker that logged any
    assert len(warned) == sum("evaluator NoAnswer failed" in t for t in per_worker) >= 1, (
        proc.stderr
    )
    assert warned[0].startswith("nexrl.rollout.worker.base - WARNING - evaluator NoAnswer")
    for line in failures:
        assert line.startswith("distributed.worker - ERROR - Compute Failed evaluate-g")
        assert "details and repeats: logs/dask-worker-" in line
    # every failure, traceback included, is in the workers' log files
    text = "".join(per_worker)
    assert text.count("Compute Failed") == 12
    assert text.count("Traceback:") == 12
    assert "line 21, in evaluate" in text  # the traceback, with where it was raised
    assert text.count("evaluator NoAnswer failed") == 8
    assert text.count("deepspeed: op built") == 8 and "op built" not in proc.stderr


CLOSING = textwrap.dedent(
    """
    import sys, time
    from distributed import Client, LocalCluster

    from nexrl.core.process.task_logs import install_task_logs

    logs = sys.argv[1]

    def rollout(i):  # still running when the run shuts its workers down
        import logging

        time.sleep(3)
        try:
            raise ConnectionError("cannot reach inference server")
        except ConnectionError:
            logging.getLogger("nexrl.rollout.worker.base").warning(
                "rollout of group %d raised", i, exc_info=True
            )
        return i

    if __name__ == "__main__":
        with LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address="127.0.0.1:0"
        ) as cluster, Client(cluster) as client:
            install_task_logs(client, logs)
            futures = [client.submit(rollout, i) for i in range(2)]
            time.sleep(1)  # both are running
        print("done", file=sys.stderr)
    """
)


def test_a_task_that_logs_while_its_worker_closes_stays_off_the_terminal(
    tmp_path: Path,
) -> None:
    """A run that stops with rollouts in flight: what they log while their worker
    closes (a warning with its traceback) goes to the worker's log file, not to the
    terminal through Python's last-resort handler."""
    logs = tmp_path / "logs"
    proc = run_script(tmp_path / "closing.py", CLOSING, logs)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "cannot reach" not in proc.stderr, proc.stderr
    (log,) = logs.glob("dask-worker-*.log")
    text = log.read_text()
    assert text.count("rollout of group") == 2 and "ConnectionError" in text


PER_OUTPUT = textwrap.dedent(
    """
    import sys
    from distributed import Client, LocalCluster

    from nexrl.core.process.task_logs import install_task_logs

    logs = sys.argv[1]

    def scored(i):  # as BaseRolloutWorker.evaluate logs an evaluator that raised
        import logging

        log = logging.getLogger("nexrl.rollout.worker.base")
        row = '{"prompt": "max of %d %d %d", "answer": "%d"}' % (i, i + 1, i + 2, i + 2)
        try:  # each sample a different model output, so each message differs
            int(f"answer {i}")
        except ValueError as exc:
            log.warning("evaluator %s failed on data row %s", "Digits", row, exc_info=exc)
        try:
            {}[f"field{i % 2}"]
        except KeyError as exc:
            log.warning("evaluator %s failed on data row %s", "Digits", row, exc_info=exc)
        return 0.0

    if __name__ == "__main__":
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as cluster, Client(cluster) as client:
            install_task_logs(client, logs)
            assert client.gather([client.submit(scored, i) for i in range(30)]) == [0.0] * 30
        print("done", file=sys.stderr)
    """
)


def test_one_line_per_failure_kind_not_per_distinct_message(tmp_path: Path) -> None:
    """An evaluator that raises on every sample, each time with a different message (the
    model's output in it, another data row): one terminal line per kind of failure (the
    message's template and the exception's type) per worker, not one per sample."""
    logs = tmp_path / "logs"
    proc = run_script(tmp_path / "per_output.py", PER_OUTPUT, logs)
    assert proc.returncode == 0, proc.stderr
    per_worker = [p.read_text() for p in sorted(logs.glob("dask-worker-*.log"))]
    warned = [line for line in proc.stderr.splitlines() if "evaluator Digits failed" in line]
    first = [line for line in warned if "(shown once per kind, then counted at 10" in line]
    counted = [line for line in warned if "times so far in this process" in line]
    assert len(first) + len(counted) == len(warned)
    for kind in ("ValueError", "KeyError"):
        lines = [line for line in first if f": {kind}:" in line]
        assert len(lines) == sum(f"{kind}:" in t for t in per_worker) >= 1, proc.stderr
        assert all("details and repeats: logs/dask-worker-" in x for x in lines)
        # the 10th of a kind in a worker is said with its count (30 of each in all)
        tenth = [t.count(f"{kind}:") >= 10 for t in per_worker]
        said = [line for line in counted if f": {kind}:" in line]
        assert len(said) == sum(tenth) >= 1, proc.stderr  # one worker ran >= 15 of 30
        assert all("the same kind 10 times so far in this process" in x for x in said)
    assert len(warned) <= 8, proc.stderr  # 2 kinds x 2 workers x (first, 10th), of 60
    text = "".join(per_worker)
    assert text.count("evaluator Digits failed") == 60  # every one in the log files
