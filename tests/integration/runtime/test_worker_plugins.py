"""A recipe's plugins are imported in every Dask worker process, including later ones.

A real ``LocalCluster`` of worker processes started by ``start_cluster``; the
driver (this process) never imports the plugin, so a name a worker knows was
registered by that worker's own import.
"""

from __future__ import annotations

import logging
import os
import textwrap
import uuid
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.sections.cluster import ClusterConfig
from nexrl.core.plugins import resolve_plugins
from nexrl.driver.cluster.cluster import start_cluster
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS

logging.getLogger("distributed").setLevel(logging.ERROR)


def knows(name: str) -> tuple[int, bool]:
    from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS

    return os.getpid(), name in ADVANTAGE_ESTIMATORS.names()


def write_plugin(folder: Path, name: str) -> Path:
    path = folder / "plugin_algos.py"
    path.write_text(
        textwrap.dedent(
            f"""
            from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS


            @ADVANTAGE_ESTIMATORS.register("{name}")
            def estimator(token_level_rewards, response_mask, group_ids, run_ids=None):
                return token_level_rewards, token_level_rewards
            """
        )
    )
    return path


def test_every_worker_process_imports_the_plugins_also_one_started_later(
    tmp_path: Path,
) -> None:
    name = f"worker_estimator_{uuid.uuid4().hex[:8]}"
    resolved = resolve_plugins([write_plugin(tmp_path, name).name], [tmp_path])
    handle = start_cluster(
        ClusterConfig(n_workers=2, dashboard_address="127.0.0.1:0"), "t", plugins=resolved
    )
    try:
        seen = handle.client.run(knows, name)
        assert len(seen) == 2
        assert all(ok for _, ok in seen.values()), seen
        assert {pid for pid, _ in seen.values()}.isdisjoint({os.getpid()})
        assert name not in ADVANTAGE_ESTIMATORS  # the driver never imported it

        assert handle.cluster is not None
        handle.cluster.scale(3)
        handle.client.wait_for_workers(3, timeout=120)
        later = handle.client.run(knows, name)
        assert len(later) == 3
        assert all(ok for _, ok in later.values()), later
        # A task on the new worker sees it too (it imported before its first task).
        (new,) = set(later) - set(seen)
        assert handle.client.submit(knows, name, workers=[new], pure=False).result(60)[1]
    finally:
        handle.close()


def test_a_plugin_a_worker_cannot_import_is_a_recipe_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("raise ImportError('needs a package the workers lack')\n")
    with pytest.raises(RecipeError) as info:
        start_cluster(
            ClusterConfig(n_workers=1, dashboard_address="127.0.0.1:0"), "t", plugins=[str(bad)]
        )
    (problem,) = info.value.problems
    assert problem.startswith(
        f"plugins[0]: importing {bad} failed: ImportError: needs a package the workers lack "
        "(on Dask worker tcp://127.0.0.1:"
    )
