"""One warm parent for every in-process run of a pytest process (``Controller(...).run()``).

``nexrl train`` starts a warm parent per run (``nexrl.core.process.forkserver``): the
trainer's worker, the rollout workers and the embedded server fork from it with torch,
transformers and Dask already imported. The in-process runs of the files a pytest
process runs (a file, or a batch of files: ``batch_compatibility_tag`` in this folder's
BUILD) share one here, started by the first file that runs ``Controller`` itself:
without it each run spawned every process fresh (~6 s of CPU per process to import).
What a test sets in the environment before a run still reaches the run's workers
(``changed_environ``). Files whose runs are subprocesses (``python -m
nexrl.driver.cli.train``: each starts its own) start none here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def warm_parent_stopped_at_the_end() -> Iterator[None]:
    yield
    from nexrl.core.process.forkserver import stop_warm_parent

    stop_warm_parent()


@pytest.fixture(scope="module", autouse=True)
def warm_parent(request: pytest.FixtureRequest, warm_parent_stopped_at_the_end: None) -> None:
    if hasattr(request.module, "Controller"):  # the file runs the controller in-process
        from nexrl.core.process.forkserver import start_warm_parent

        start_warm_parent()
