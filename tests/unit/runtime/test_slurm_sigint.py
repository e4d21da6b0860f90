"""Importing dask_jobqueue (a Slurm run does, after the controller set its Ctrl-C
handler) must not replace the process's SIGINT handler: dask_jobqueue.runner sets
SIGINT to sys.exit() at import, which made a Ctrl-C on a Slurm run exit 0 without a
checkpoint instead of checkpointing and exiting 130."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nexrl.driver.cluster.slurm  # noqa: F401  (the subprocesses import it: a dependency)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_import_jobqueue_keeps_the_sigint_handler() -> None:
    # a fresh interpreter: dask_jobqueue must not have been imported yet
    code = textwrap.dedent(
        """
        import signal
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGINT, mine)
        from nexrl.driver.cluster.slurm import import_jobqueue
        jq = import_jobqueue()
        assert jq.SLURMCluster is not None and jq.slurm.SLURMJob is not None
        assert signal.getsignal(signal.SIGINT) is mine, signal.getsignal(signal.SIGINT)
        print("ok")
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_plain_import_does_replace_it() -> None:
    """The upstream behaviour this guards against (if it goes away, so can the guard)."""
    code = textwrap.dedent(
        """
        import signal
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGINT, mine)
        import dask_jobqueue  # noqa: F401
        print(signal.getsignal(signal.SIGINT) is mine)
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
