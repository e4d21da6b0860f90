"""End-to-end: an advantage estimator registered by a recipe plugin is the one the
trainer actor (a Dask worker process) trains with."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from nexrl.controller import Controller
from nexrl.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows


def test_the_trainer_actor_trains_with_the_plugins_estimator(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    plugin = tmp_path / "marked_algorithms.py"
    plugin.write_text(
        textwrap.dedent(
            f"""
            import os
            import uuid

            from nexrl.algorithms import ADVANTAGE_ESTIMATORS


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
