"""End-to-end: parts registered by a recipe's plugins are the ones the run uses, in
the process that uses them: an advantage estimator (the trainer actor), and the
developer guide's rollout-worker type, trainer, training engine and metric sink."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import DATA, RECIPE, overrides, train_rows


def test_the_trainer_actor_trains_with_the_plugins_estimator(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    plugin = tmp_path / "marked_algorithms.py"
    plugin.write_text(
        textwrap.dedent(
            f"""
            import os
            import uuid

            from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS


            @ADVANTAGE_ESTIMATORS.register("marked_grpo")
            def marked_grpo(token_level_rewards, response_mask, group_ids, run_ids=None):
                \"\"\"GRPO, leaving a file named after the calling process in {calls}.\"\"\"
                path = os.path.join({str(calls)!r}, f"{{os.getpid()}}-{{uuid.uuid4().hex}}")
                with open(path, "w") as f:
                    f.write(str(token_level_rewards.shape[0]))
                grpo = ADVANTAGE_ESTIMATORS.get("grpo")
                return grpo(token_level_rewards, response_mask, group_ids, run_ids)
            """
        )
    )
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(out, f"plugins=[{plugin}]", "algorithm.advantage_estimator=marked_grpo", steps=2),
    )
    # the recipe check calls the estimator once in the driver, on its 4-sample test batch
    (checked,) = calls.iterdir()
    assert checked.read_text() == "4" and checked.name.startswith(f"{os.getpid()}-")
    checked.unlink()
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (2, None)
    assert [r["step"] for r in train_rows(out)] == [1, 2]

    marks = list(calls.iterdir())
    assert len(marks) == 2  # one call per training step
    assert [m.read_text() for m in marks] == ["32", "32"]  # the whole batch
    pids = {int(m.name.split("-")[0]) for m in marks}
    assert len(pids) == 1 and os.getpid() not in pids  # in the trainer actor's worker process


MARKS = """
import os
import uuid

from nexrl.rollout.worker.registry import ROLLOUT_WORKERS
from nexrl.trainer.engine import TRAINING_ENGINES
from nexrl.trainer.registry import TRAINERS

MARKS = {marks!r}


def mark(what, text=""):
    with open(os.path.join(MARKS, f"{{what}}-{{os.getpid()}}-{{uuid.uuid4().hex}}"), "w") as f:
        f.write(text)


@ROLLOUT_WORKERS.register("shout_marked")
class MarkedWorker(ROLLOUT_WORKERS.get("shout")):
    def format_task_query(self, data_item):
        messages = super().format_task_query(data_item)
        mark("worker", messages[0]["content"])
        return messages


@TRAINERS.register("clip_marked")
class MarkedTrainer(TRAINERS.get("grpo_reward_clip")):
    def prepare_batch(self, batch):
        mark("trainer")
        return super().prepare_batch(batch)


@TRAINING_ENGINES.register("counted_marked")
def counted_marked(model, config, **kwargs):
    mark("engine")
    return TRAINING_ENGINES.get("deepspeed_counted")(model, config, **kwargs)
"""


def test_the_guides_plugins_of_every_kind_run_together(tmp_path: Path) -> None:
    """The developer guide's examples of a rollout-worker type, a trainer, a training
    engine and a metric sink (docs/developer-guide.md, "One way in") in one real run,
    each used where the run uses it: the rollout futures' workers, the trainer actor,
    the driver. A test plugin subclasses each (through its registry) to leave a mark."""
    import csv
    import re

    guide = Path("docs/developer-guide.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    files = ["my_workers.py", "my_trainers.py", "my_engines.py", "my_sinks.py"]
    for file in files:
        (block,) = [b for b in blocks if b.startswith(f"# {file}\n")]
        (tmp_path / file).write_text(block)
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "marks.py").write_text(MARKS.format(marks=str(marks)))
    out = tmp_path / "run"
    plugins = ",".join(str(tmp_path / f) for f in [*files, "marks.py"])
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"plugins=[{plugins}]",
            "rollout_worker.type=shout_marked",
            "trainer.type=clip_marked",
            "trainer.backend=counted_marked",
            "logger.backends=[console,csv]",
            steps=2,
        ),
    )
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (2, None)
    assert [r["step"] for r in train_rows(out)] == [1, 2]

    with (out / "metrics.csv").open() as f:  # the driver's sink, a row a step
        assert [r["step"] for r in csv.DictReader(f)][:2] == ["1", "2"]
    found: dict[str, list[Path]] = {}
    for path in marks.iterdir():
        found.setdefault(path.name.split("-")[0], []).append(path)
    assert len(found["engine"]) == 1  # one rank, one engine
    assert len(found["trainer"]) == 2  # a batch a step
    assert {p.read_text() for p in found["worker"]} <= {  # every prompt asked in capitals
        row["prompt"].upper() for row in map(json.loads, Path(DATA).read_text().splitlines())
    }
    pids = {int(p.name.split("-")[1]) for ps in found.values() for p in ps}
    assert os.getpid() not in pids  # all in Dask worker processes, none in the driver
