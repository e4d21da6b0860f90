"""The developer guide's "One way in" examples run as written: each registers a part
of one kind in a recipe plugin, the recipe check accepts the name, and the part
does its job where the run would use it (a real HTTP server, a real Dask cluster,
files on disk). ``tests/e2e/test_plugins_run.py`` runs them together in a real run."""

from __future__ import annotations

import csv
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
import torch

from nexrl.core.config.errors import RecipeError
from nexrl.core.plugins import Registry
from nexrl.driver.recipe import load_recipe_checked

GUIDE = Path("docs/developer-guide.md").resolve()
RECIPE = Path("recipes/max_digit/max_digit_tiny.yaml").resolve()


def example(file: str) -> str:
    """The guide's python block that starts with ``# <file>``."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(f"# {file}\n")]
    return block


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A copy of the default recipe beside the plugin files; registries left as found."""
    (tmp_path / "recipe.yaml").write_text(RECIPE.read_text())
    for name in ("evaluator.py", "data"):
        (tmp_path / name).symlink_to((RECIPE.parent / name).resolve())
    before = {kind: set(r._entries) for kind, r in Registry.ALL.items()}
    yield tmp_path
    for kind, registry in Registry.ALL.items():
        for name in set(registry._entries) - before.get(kind, set()):
            del registry._entries[name]


def checked(workspace: Path, file: str, *overrides: str) -> Any:
    (workspace / file).write_text(example(file))
    return load_recipe_checked(workspace / "recipe.yaml", [f"plugins=[{file}]", *overrides])


def test_the_table_names_every_registry() -> None:
    section = GUIDE.read_text().split("### One way in", 1)[1].split("\n### ", 1)[0]
    registries = _registries()
    assert len(registries) == 14
    missing = [name for name in registries if f"{name.rsplit('.', 1)[1]}`" not in section]
    assert not missing, f"not in the guide's table: {missing}"


def _registries() -> dict[str, Registry[Any]]:
    import importlib

    out: dict[str, Registry[Any]] = {}
    for module in (
        "nexrl.rollout.worker.registry",
        "nexrl.rollout.evaluators.registry",
        "nexrl.trainer.registry",
        "nexrl.trainer.engine",
        "nexrl.inference.reload",
        "nexrl.driver.cluster.cluster",
        "nexrl.driver.metrics.sinks",
        "nexrl.trainer.algorithms.registry",
        "nexrl.trainer.algorithms.aggregation",
        "nexrl.trainer.algorithms.correction",
    ):
        for attr, value in vars(importlib.import_module(module)).items():
            if isinstance(value, Registry) and all(value is not r for r in out.values()):
                out[f"{module}.{attr}"] = value
    return out


def test_a_rollout_worker_type(workspace: Path) -> None:
    from nexrl.core.pool.config import PoolConfig
    from nexrl.driver.controller.setup import rollout_spec  # the spec the run's futures get
    from nexrl.rollout.worker.registry import worker_class
    from nexrl.rollout_worker import SimpleRolloutWorker

    recipe = checked(workspace, "my_workers.py", "rollout_worker.type=shout")
    spec = rollout_spec(recipe, PoolConfig(), ["http://127.0.0.1:9"])
    cls = worker_class(spec)
    assert cls.__name__ == "ShoutingWorker"
    worker = cls.from_spec(spec, client=None, evaluator=cast(Any, None))
    assert worker.format_task_query({"prompt": "max of 3 1 2"}) == [
        {"role": "user", "content": "MAX OF 3 1 2"}
    ]
    assert isinstance(worker, SimpleRolloutWorker) and worker.group_requests  # as 'simple'


def test_an_evaluator_with_checked_options(workspace: Path) -> None:
    from nexrl.rollout.evaluators.registry import build_evaluator
    from nexrl.rollout_worker import BaseEvaluationTarget

    checked(
        workspace,
        "my_evaluators.py",
        "rollout_worker.evaluator=at_most",
        "+rollout_worker.evaluator_options.limit=4",
        "rollout_worker.example_answer=null",
    )
    at_most = build_evaluator("at_most", {"limit": 4})
    scores = [
        at_most.evaluate({}, BaseEvaluationTarget(final_answer=a)).reward for a in ("9", "12345")
    ]
    assert scores == [1.0, 0.0]
    with pytest.raises(RecipeError, match=r"evaluator_options.limit: expected int, got 'x'"):
        build_evaluator("at_most", {"limit": "x"})


def test_a_trainer(workspace: Path, tiny_model_dir: Path, vocab_size: int) -> None:
    from tests.unit.trainer._helpers import make_batch, spec
    from tests.unit.trainer._plain_engine import plain_trainer

    recipe = checked(workspace, "my_trainers.py", "trainer.type=grpo_reward_clip")
    trainer = plain_trainer(
        spec(tiny_model_dir, trainer={"type": recipe.cfg.trainer.type}, roots=recipe.roots)
    )
    assert type(trainer).__name__ == "RewardClipTrainer"
    batch = make_batch(vocab_size, groups=2, group_size=2)
    batch.tensors["rewards"] = torch.tensor([3.0, -1.0, 0.5, 1.0])
    prepared, _ = trainer.prepare_batch(batch)
    assert prepared["rewards"].tolist() == [1.0, 0.0, 0.5, 1.0]


def test_a_training_engine_is_checked_and_found(workspace: Path) -> None:
    from nexrl.trainer.engine import load_backend

    checked(workspace, "my_engines.py", "trainer.backend=deepspeed_counted")
    assert load_backend("deepspeed_counted").__name__ == "build_counted"
    # built for real by a trainer in tests/e2e/test_plugins_run.py


class _Engine(BaseHTTPRequestHandler):
    loads: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/load":
            _Engine.loads.append(body)
        self.send_response(200 if self.path == "/load" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def engine_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Engine.loads = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_reload_adapter_reloads_a_real_server(workspace: Path, engine_url: str) -> None:
    from nexrl.inference.reload import make_reload_adapter

    checked(
        workspace,
        "my_adapters.py",
        "service.inference_service.backend=my_engine",
        f"service.inference_service.base_urls=[{engine_url}/v1]",
    )
    with make_reload_adapter("my_engine", [engine_url], timeout_s=10) as adapter:
        (outcome,) = adapter.reload("/runs/x/snapshots/v3", 3)
        assert adapter.health() == {engine_url: True}
    assert outcome.ok and outcome.detail == "loaded /runs/x/snapshots/v3"
    assert _Engine.loads == [{"path": "/runs/x/snapshots/v3", "version": 3}]
    assert adapter.policy_version == 3


def test_a_cluster_type_starts_a_real_cluster(workspace: Path) -> None:
    from nexrl.core.util.dask_workers import workers_of
    from nexrl.driver.cluster.cluster import start_cluster

    recipe = checked(workspace, "my_clusters.py", "cluster.type=threads")
    handle = start_cluster(recipe.cfg.cluster, "x", roots=recipe.roots)
    try:
        assert handle.client.submit(sum, [1, 2]).result(timeout=60) == 3
        (worker,) = workers_of(handle.client).values()
        assert worker["resources"] == {"GPU": 1}
    finally:
        handle.close()


def _csv_rows(folder: Path) -> list[dict[str, str]]:
    with (folder / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("entry", ["csv", "my_sinks.py:CsvSink"])
def test_a_metric_sink_by_name_or_by_class(workspace: Path, entry: str) -> None:
    from nexrl.driver.metrics import MetricsTracker

    recipe = checked(workspace, "my_sinks.py", f"logger.backends=[console,{entry!r}]")
    tracker = MetricsTracker([entry], workspace / "run", run_name="t", roots=recipe.roots)
    tracker.log(1, {"reward/mean": 0.25})
    tracker.log(2, {"reward/mean": 0.5})
    tracker.close()
    rows = _csv_rows(workspace / "run")
    assert [(r["step"], r["reward/mean"]) for r in rows] == [("1", "0.25"), ("2", "0.5")]


def test_a_wrong_name_or_class_is_one_line_naming_the_field(workspace: Path) -> None:
    with pytest.raises(RecipeError) as exc:
        checked(workspace, "my_workers.py", "rollout_worker.type=shuot")
    (line,) = exc.value.problems
    assert line.startswith("rollout_worker.type: unknown rollout worker type 'shuot'; did you ")
    assert "'shout'" in line
    with pytest.raises(RecipeError) as exc:
        checked(workspace, "my_workers.py", "trainer.type=my_workers.py:ShoutingWorker")
    (line,) = exc.value.problems
    assert line == (
        "trainer.type: 'my_workers.py:ShoutingWorker' is a class that does not subclass "
        "nexrl.trainer.base.SelfHostedTrainer"
    )
