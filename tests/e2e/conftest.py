"""One warm parent for every in-process run of a test file (``Controller(...).run()``).

``nexrl train`` starts a warm parent per run (``nexrl.core.process.forkserver``): the
trainer's worker, the rollout workers and the embedded server fork from it with torch,
transformers and Dask already imported. The runs a test file makes in its own process
share one here, started once per pytest process: without it each of them spawned
every process fresh (~6 s of CPU per process to import). What a test sets in the
environment before a run still reaches the run's workers (``changed_environ``).
Runs started as subprocesses (``python -m nexrl.driver.cli.train``) start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def warm_parent() -> Iterator[None]:
    from nexrl.core.process.forkserver import start_warm_parent, stop_warm_parent

    start_warm_parent()
    yield
    stop_warm_parent()
