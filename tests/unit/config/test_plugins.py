"""A recipe's ``plugins:`` are imported before the recipe check, so their names are known."""

from __future__ import annotations

import re
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


def unique(prefix: str) -> str:
    """A name no other test registers (the registries are per process)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def write_plugin(folder: Path, name: str, file: str = "my_algorithms.py") -> Path:
    path = folder / file
    path.write_text(
        textwrap.dedent(
            f"""
            from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS


            @ADVANTAGE_ESTIMATORS.register("{name}")
            def estimator(token_level_rewards, response_mask, group_ids, run_ids=None):
                adv = token_level_rewards.sum(-1, keepdim=True) * response_mask
                return adv, adv
            """
        )
    )
    return path


def problems_of(*overrides: str, recipe: str = DEFAULT) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe, list(overrides))
    return info.value.problems


def test_a_plugin_file_registers_the_estimator_the_recipe_names(tmp_path: Path) -> None:
    name = unique("plugin_estimator")
    plugin = write_plugin(tmp_path, name)
    recipe = load_recipe_checked(
        DEFAULT, [f"plugins=[{plugin}]", f"algorithm.advantage_estimator={name}"]
    )
    assert recipe.cfg.plugins == [str(plugin)]
    assert recipe.plugins == (str(plugin),)  # what every worker imports
    assert name in ADVANTAGE_ESTIMATORS.names()


def test_without_the_plugin_the_check_names_the_unknown_estimator(tmp_path: Path) -> None:
    name = unique("unregistered_estimator")
    write_plugin(tmp_path, name)  # written, but not listed in plugins
    problems = problems_of(f"algorithm.advantage_estimator={name}")
    assert len(problems) == 1
    assert problems[0].startswith(
        f"algorithm.advantage_estimator: unknown advantage estimator '{name}'"
    )


def test_check_on_the_command_line_sees_the_plugins_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique("cli_estimator")
    plugin = write_plugin(tmp_path, name)
    est = f"algorithm.advantage_estimator={name}"
    assert main([DEFAULT, est, "--check"]) == 2
    assert f"unknown advantage estimator '{name}'" in capsys.readouterr().err
    assert main([DEFAULT, f"plugins=[{plugin}]", est, "--check"]) == 0
    assert "recipe is valid" in capsys.readouterr().out


def test_a_relative_plugin_path_is_found_next_to_the_recipe(tmp_path: Path) -> None:
    name = unique("relative_estimator")
    plugin = write_plugin(tmp_path, name)
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(
        Path(DEFAULT)
        .read_text()
        .replace("advantage_estimator: grpo", f"advantage_estimator: {name}")
        + "\nplugins: [my_algorithms.py]\n"
    )
    # The recipe's own relative paths (recipes/max_digit/...) resolve in the working directory.
    recipe = load_recipe_checked(str(recipe_file))
    assert recipe.plugins == (str(plugin.resolve()),)
    assert recipe.cfg.algorithm.advantage_estimator == name


def test_a_module_plugin_is_imported_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("module_estimator")
    package = tmp_path / unique("mypkg")
    package.mkdir()
    (package / "__init__.py").write_text("")
    write_plugin(package, name, file="algos.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = f"{package.name}.algos"
    recipe = load_recipe_checked(
        DEFAULT, [f"plugins=[{module}]", f"algorithm.advantage_estimator={name}"]
    )
    assert recipe.plugins == (module,)
    assert module in sys.modules


def test_a_plugin_that_raises_gives_one_line_naming_the_field_and_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('no GPU here\\nsecond line')\n")
    problems = problems_of(f"plugins=[{bad}]")
    assert problems == [f"plugins[0]: importing {bad} failed: RuntimeError: no GPU here"]


def test_plugin_mistakes_name_the_entry(tmp_path: Path) -> None:
    good = write_plugin(tmp_path, unique("fine_estimator"))
    problems = problems_of(f"plugins=[{good},missing.py,'not a module']")
    assert problems[0].startswith("plugins[1]: file 'missing.py' not found")
    assert problems[1] == (
        "plugins[2]: 'not a module' is neither a file 'path/to/file.py' "
        "nor a module 'package.module'"
    )
    assert len(problems) == 2
    (missing,) = problems_of(f"plugins=[{unique('no_such_module')}.algos]")
    assert missing.startswith("plugins[0]: no module named 'no_such_module_")


def test_a_plugin_registering_a_taken_name_says_so(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path, "grpo")
    (problem,) = problems_of(f"plugins=[{plugin}]")
    assert problem == (
        f"plugins[0]: importing {plugin} failed: "
        "ValueError: advantage estimator 'grpo' is already registered"
    )


def test_a_plugin_registers_a_metric_sink_that_the_check_accepts_and_the_tracker_uses(
    tmp_path: Path,
) -> None:
    from nexrl.driver.metrics import METRIC_SINKS, MetricsTracker

    name = unique("sink")
    plugin = tmp_path / "my_sink.py"
    plugin.write_text(
        textwrap.dedent(
            f"""
            import json

            from nexrl.driver.metrics import METRIC_SINKS
            from nexrl.driver.metrics.sinks import MetricSink


            @METRIC_SINKS.register("{name}")
            class LinesSink(MetricSink):
                name = "{name}"

                def log(self, step, metrics):
                    with open(self.output_dir / "lines.txt", "a") as f:
                        f.write(json.dumps({{"step": step, **metrics}}) + "\\n")
            """
        )
    )
    assert any(name in p for p in problems_of(f"logger.backends=[console,{name}]"))
    try:
        recipe = load_recipe_checked(DEFAULT, [f"plugins=[{plugin}]", f"logger.backends=[{name}]"])
        assert list(recipe.cfg.logger.backends) == [name] and name in METRIC_SINKS
        with MetricsTracker(recipe.cfg.logger.backends, tmp_path / "run", run_name="t") as tr:
            tr.log(3, {"reward/mean": 0.5})
    finally:  # unit test files share a process: other tests list the valid sinks
        METRIC_SINKS._entries.pop(name, None)
    assert (tmp_path / "run" / "lines.txt").read_text() == '{"step": 3, "reward/mean": 0.5}\n'


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (  # the calling convention not followed
            "def estimator(rewards, mask):\n    return rewards, rewards",
            r"raised TypeError: estimator\(\) takes 2 positional arguments but 4 were given",
        ),
        (  # one advantage per sample instead of per token
            "def estimator(token_level_rewards, response_mask, group_ids, run_ids=None):\n"
            "    s = token_level_rewards.sum(-1)\n    return s, s",
            r"returned shapes \[\(4,\), \(4,\)\] for a \[4, 3\] batch",
        ),
        (
            "def estimator(token_level_rewards, response_mask, group_ids, run_ids=None):\n"
            "    adv = token_level_rewards * float('nan')\n    return adv, adv",
            r"returned NaN/inf on finite rewards",
        ),
    ],
)
def test_a_plugin_estimator_that_cannot_train_is_one_line_before_the_run(
    tmp_path: Path, body: str, problem: str
) -> None:
    """Before, each of these started the cluster and stopped at step 1 with a trainer
    error naming no file and saying to run the same command again."""
    name = unique("broken_estimator")
    plugin = tmp_path / "broken.py"
    plugin.write_text(
        f"from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS\n\n\n"
        f'@ADVANTAGE_ESTIMATORS.register("{name}")\n{body}\n'
    )
    (line,) = problems_of(f"plugins=[{plugin}]", f"algorithm.advantage_estimator={name}")
    assert line.startswith(f"algorithm.advantage_estimator: '{name}' ({plugin}:4) ")
    assert re.search(problem, line), line
    assert "returns (advantages [B, T], returns [B, T])" in line


def test_a_plugin_policy_loss_returning_per_token_losses_is_one_line(tmp_path: Path) -> None:
    name = unique("broken_loss")
    plugin = tmp_path / "loss.py"
    plugin.write_text(
        textwrap.dedent(
            f"""
            from nexrl.trainer.algorithms import POLICY_LOSSES


            @POLICY_LOSSES.register("{name}")
            def loss(log_prob, old_log_prob, advantages, response_mask, loss_agg_mode="token-mean"):
                return -advantages * log_prob, {{}}
            """
        )
    )
    (line,) = problems_of(f"plugins=[{plugin}]", f"algorithm.policy_loss={name}")
    assert line.startswith(
        f"algorithm.policy_loss: '{name}' ({plugin}:5) returned a loss of shape (4, 3), "
        "not one number"
    )


def test_every_built_in_estimator_and_loss_pass_the_dry_run() -> None:
    from nexrl.trainer.algorithms import LOSS_AGGREGATIONS, POLICY_LOSSES

    def built_in(registry: Any) -> list[str]:  # not the other tests' plugins
        return [n for n in registry.names() if registry.get(n).__module__.startswith("nexrl.")]

    from nexrl.trainer.algorithms.value import estimator_takes_values

    for estimator in built_in(ADVANTAGE_ESTIMATORS):
        # gae, nstep: on the trainer with a value model
        takes_values = estimator_takes_values(ADVANTAGE_ESTIMATORS.get(estimator))
        trainer = "self_hosted_ppo" if takes_values else "self_hosted_grpo"
        for loss in built_in(POLICY_LOSSES):
            for agg in LOSS_AGGREGATIONS.names():
                load_recipe_checked(
                    DEFAULT,
                    [
                        f"trainer.type={trainer}",
                        f"algorithm.advantage_estimator={estimator}",
                        f"algorithm.policy_loss={loss}",
                        f"algorithm.loss_agg_mode={agg}",
                    ],
                )
