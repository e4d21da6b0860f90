"""Renamed recipe keys keep working: the value moves to the new key, with a deprecation line.

The old-style recipe is the default recipe (recipes/max_digit/max_digit_tiny.yaml)
written with the old names, loaded for real (Hydra compose, structure check,
every component's checks) and through ``nexrl train --check``.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.renames import MERGED, RENAMED
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = Path("recipes/max_digit/max_digit_tiny.yaml")

# (new text, old text) of the default recipe.
OLD_NAMES = [
    (
        "  prompt_key: prompt\n",
        "  prompt_key: prompt\n  rollout_repeat_n: ${trajectory_pool.group_size}\n",
    ),
    (
        '  evaluator: "recipes/max_digit/evaluator.py:MaxDigitEvaluator"\n',
        '  evaluator_module_path: "recipes/max_digit/evaluator.py:MaxDigitEvaluator"\n'
        "  num_workers: 4\n",
    ),
    ("  group_size: 8            # samples per prompt: the GRPO group\n", ""),
    ("  key_list: [group_id]\n", "  key_list: [group_id]\n  group_size: 8\n"),
    ("  save_every: 25\n", "  save_freq: 10\n"),
    ("  every: 25\n", "  freq: 5\n"),
]

DEPRECATED = [
    "data.rollout_repeat_n is deprecated: set rollout_worker.group_size "
    "(the old key still works for now)",
    "trajectory_pool.group_size is deprecated: set rollout_worker.group_size "
    "(the old key still works for now)",
    "rollout_worker.evaluator_module_path is deprecated: set rollout_worker.evaluator "
    "(the old key still works for now)",
    "rollout_worker.num_workers is deprecated: set rollout_worker.max_groups_in_flight "
    "(the old key still works for now)",
    "trainer.save_freq is deprecated: set trainer.save_every (the old key still works for now)",
    "validate.freq is deprecated: set validate.every (the old key still works for now)",
]


def old_style(tmp_path: Path, replace: dict[str, str] | None = None) -> str:
    """The default recipe with the old key names, in ``tmp_path`` (its data and
    evaluator paths are relative to the workspace root, the working directory)."""
    text = DEFAULT.read_text()
    for new, old in OLD_NAMES:
        assert text.count(new) == 1, new
        text = text.replace(new, old)
    for a, b in (replace or {}).items():
        assert text.count(a) == 1, a
        text = text.replace(a, b)
    path = tmp_path / "old.yaml"
    path.write_text(text)
    return str(path)


def problems_of(recipe: str, *overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe, list(overrides))
    return info.value.problems


def test_an_old_style_recipe_loads_with_the_new_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.recipe"):
        recipe = load_recipe_checked(old_style(tmp_path))
    cfg = recipe.cfg
    # rollout_repeat_n: ${trajectory_pool.group_size} was read before either old key went.
    assert cfg.rollout_worker.group_size == 8
    assert cfg.rollout_worker.evaluator == "recipes/max_digit/evaluator.py:MaxDigitEvaluator"
    assert cfg.rollout_worker.max_groups_in_flight == 4
    assert cfg.trainer.save_every == 10
    assert cfg.validate.every == 5
    assert "rollout_repeat_n" not in cfg.data and "group_size" not in cfg.trajectory_pool
    assert list(recipe.deprecations) == DEPRECATED
    logged = [r.getMessage() for r in caplog.records if r.name == "nexrl.driver.recipe"]
    assert logged == [f"{tmp_path / 'old.yaml'}: {line}" for line in DEPRECATED]
    assert all(
        r.levelno == logging.WARNING for r in caplog.records if r.name == "nexrl.driver.recipe"
    )


def test_a_recipe_with_the_new_names_has_no_deprecations() -> None:
    assert load_recipe_checked(DEFAULT).deprecations == ()


def test_check_prints_one_warning_line_per_old_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = old_style(tmp_path)
    assert main([recipe, "--check"]) == 0
    out, err = capsys.readouterr()
    assert f"{recipe}: recipe is valid" in out
    assert err.splitlines() == [f"warning: {recipe}: {line}" for line in DEPRECATED]


def test_print_config_shows_the_new_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([old_style(tmp_path), "--print-config"]) == 0
    out, err = capsys.readouterr()
    assert "save_every: 10" in out and "save_freq" not in out and "rollout_repeat_n" not in out
    assert len(err.splitlines()) == len(DEPRECATED)


def test_two_old_keys_with_different_values_are_one_problem(tmp_path: Path) -> None:
    recipe = old_style(
        tmp_path, {"rollout_repeat_n: ${trajectory_pool.group_size}": "rollout_repeat_n: 4"}
    )
    (p,) = problems_of(recipe)
    assert p.startswith("rollout_worker.group_size: "), p
    assert "data.rollout_repeat_n (4)" in p and "trajectory_pool.group_size (8)" in p
    assert "different values" in p


def test_the_refused_recipe_still_shows_its_deprecations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = old_style(
        tmp_path, {"rollout_repeat_n: ${trajectory_pool.group_size}": "rollout_repeat_n: 4"}
    )
    assert main([recipe, "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[: len(DEPRECATED)] == [f"warning: {recipe}: {line}" for line in DEPRECATED]
    # the one problem on one line, after the deprecations
    assert len(err) == len(DEPRECATED) + 1 and err[-1].startswith(f"error: {recipe}: ")
    assert "Traceback" not in "\n".join(err)


def test_an_old_and_the_new_key_in_one_file(tmp_path: Path) -> None:
    same = old_style(tmp_path, {"  save_freq: 10\n": "  save_freq: 10\n  save_every: 10\n"})
    assert load_recipe_checked(same).cfg.trainer.save_every == 10
    other = old_style(tmp_path, {"  save_freq: 10\n": "  save_freq: 10\n  save_every: 20\n"})
    (p,) = problems_of(other)
    assert p.startswith("trainer.save_every: ")
    assert "trainer.save_freq (10)" in p and "trainer.save_every (20)" in p


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    # An override of the new key beats the file's old key, and the other way round.
    recipe = load_recipe_checked(old_style(tmp_path), ["trainer.save_every=3"])
    assert recipe.cfg.trainer.save_every == 3
    assert DEPRECATED[4] in recipe.deprecations
    recipe = load_recipe_checked(str(DEFAULT), ["trainer.save_freq=3"])  # file: save_every 25
    assert recipe.cfg.trainer.save_every == 3
    assert recipe.deprecations == (DEPRECATED[4],)
    # Both old group-size keys in the file; the command line sets one of them.
    recipe = load_recipe_checked(old_style(tmp_path), ["data.rollout_repeat_n=4"])
    assert recipe.cfg.rollout_worker.group_size == 4


def test_an_interpolation_of_an_old_key_follows_it(tmp_path: Path) -> None:
    recipe = old_style(
        tmp_path,
        {
            "experiment_name: max_digit_tiny\n": "seed: ${trainer.save_freq}\nexperiment_name: max_digit_tiny\n"
        },
    )
    assert load_recipe_checked(recipe).cfg.seed == 10


def test_an_old_key_that_does_not_resolve_is_a_problem(tmp_path: Path) -> None:
    (p,) = problems_of(old_style(tmp_path, {"save_freq: 10": "save_freq: ${nowhere.x}"}))
    assert p.startswith("trainer.save_freq: cannot resolve its value")


WORKER = """
from nexrl.rollout.worker.base import BaseRolloutWorker

class Mine(BaseRolloutWorker):
    async def rollout(self, item):
        return []
"""


def test_an_old_pair_becomes_one_file_and_class_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "workers.py").write_text(textwrap.dedent(WORKER))
    pair = (
        "  custom_rollout_worker_module_path: workers.py\n"
        "  custom_rollout_worker_class_name: Mine\n"
    )
    recipe = old_style(tmp_path, {"  type: simple\n": f"  type: simple\n{pair}"})
    loaded = load_recipe_checked(recipe)
    assert loaded.cfg.rollout_worker.custom_worker == "workers.py:Mine"
    assert (
        "rollout_worker.custom_rollout_worker_module_path and "
        "rollout_worker.custom_rollout_worker_class_name are deprecated: set "
        "rollout_worker.custom_worker: 'workers.py:Mine' (the old keys still work for now)"
    ) in loaded.deprecations
    # Half of the pair: one problem naming both old keys and the new form.
    half = old_style(
        tmp_path, {"  type: simple\n": "  type: simple\n  custom_rollout_worker_class_name: Mine\n"}
    )
    assert main([half, "--check"]) == 2
    err = capsys.readouterr().err
    (problem,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "rollout_worker.custom_rollout_worker_class_name is set but" in problem
    assert "rollout_worker.custom_rollout_worker_module_path is not" in problem
    assert "set rollout_worker.custom_worker ('path/to/file.py:ClassName'" in problem


def test_every_old_key_is_a_key_of_no_schema_field_and_every_new_key_is_one() -> None:
    from nexrl.core.config.schema import RecipeConfig
    from nexrl.core.config.structure import schema_leaves

    fields = {path for path, _ in schema_leaves(RecipeConfig)}
    olds = [*RENAMED, *(k for pair in MERGED.values() for k in pair)]
    assert not fields & set(olds)
    assert set(RENAMED.values()) | set(MERGED) <= fields
