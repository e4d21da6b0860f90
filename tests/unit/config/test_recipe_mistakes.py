"""A new user's mistakes in a recipe: each gets a clear message and exit 2, never a traceback."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nexrl.core.config.errors import RecipeError
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


def write_recipe(tmp_path: Path, body: str, name: str = "r.yaml") -> str:
    (tmp_path / "evaluator.py").write_text(
        textwrap.dedent(
            """
            from nexrl.rollout_worker import Evaluator, EvaluationRunResult

            class Good(Evaluator):
                def evaluate(self, data, evaluation_target):
                    return EvaluationRunResult(reward=1.0)

            class NoEvaluate:
                pass
            """
        )
    )
    (tmp_path / "train.jsonl").write_text('{"prompt": "max 1 2 3", "answer": "3"}\n')
    base = textwrap.dedent(
        """
        defaults: [nexrl_base, _self_]
        experiment_name: t
        model: {tiny: {vocab: [a, b]}}
        data: {data_files: [train.jsonl]}
        rollout_worker: {evaluator: "evaluator.py:Good", group_size: 4}
        trajectory_pool: {key_list: [group_id], batch_size: 8}
        """
    )
    path = tmp_path / name
    path.write_text(base + textwrap.dedent(body))
    return str(path)


def problems_of(recipe: str, *overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe, list(overrides))
    return info.value.problems


def test_default_recipe_is_valid_and_typed() -> None:
    recipe = load_recipe_checked(DEFAULT)
    assert recipe.cfg.trainer.lr == pytest.approx(3e-3)  # "3e-3" in YAML is a string: converted
    assert recipe.cfg.rollout_worker.group_size == 8
    assert recipe.cfg.output_dir == "runs/max_digit_tiny"


def test_minimal_recipe_in_a_temp_folder_is_valid(tmp_path: Path) -> None:
    recipe = load_recipe_checked(write_recipe(tmp_path, ""), workspace=tmp_path)
    assert recipe.cfg.trajectory_pool.batch_size == 8


def test_misspelt_defaults_entry_names_where_it_looked(tmp_path: Path) -> None:
    """Hydra's own message listed its config search path's providers on one line."""
    path = Path(write_recipe(tmp_path, ""))
    path.write_text(path.read_text().replace("[nexrl_base, _self_]", "[nexrl_bsae, _self_]"))
    (p,) = problems_of(str(path))
    assert p == (
        f"{path}: defaults: no config 'nexrl_bsae' next to the recipe ({tmp_path}) or "
        "shipped with nexrl (nexrl_base); did you mean 'nexrl_base'?"
    )


def test_a_data_file_pattern_is_its_files_sorted_and_the_run_reads_them(
    tmp_path: Path,
) -> None:
    """``data.data_files: [data/*.jsonl]``: the files, sorted, in what the run reads and
    records; a pattern that names nothing is one line saying so."""
    from nexrl.driver.controller.setup import data_config
    from nexrl.driver.data import DataLoader

    recipe = write_recipe(tmp_path, "")
    (tmp_path / "data").mkdir()
    for name, prompt in (("b.jsonl", "max 4 5 6"), ("a.jsonl", "max 1 2 3"), ("c.txt", "x")):
        (tmp_path / "data" / name).write_text(f'{{"prompt": "{prompt}", "answer": "0"}}\n')
    loaded = load_recipe_checked(recipe, ["data.data_files=[data/*.jsonl]"], workspace=tmp_path)
    files = [str(tmp_path / "data" / n) for n in ("a.jsonl", "b.jsonl")]
    assert list(loaded.cfg.data.data_files) == files
    loader = DataLoader(replace(data_config(loaded), shuffle=False))
    assert [g[0]["prompt"] for g in loader.next_batch(2)] == ["max 1 2 3", "max 4 5 6"]
    (p,) = problems_of(recipe, "data.data_files=[train.jsonl,nope/*.jsonl]")
    assert p.startswith("data.data_files: 'nope/*.jsonl' matches no file (looked up in "), p


def test_the_advice_for_a_new_run_names_the_field_that_moves_the_folder(
    tmp_path: Path,
) -> None:
    """ "start a new run with another experiment_name" did nothing for a recipe that sets
    output_dir outright."""
    from nexrl.core.config.record import another_run

    recipe = write_recipe(tmp_path, "")
    default = load_recipe_checked(recipe).cfg  # output_dir: runs/${experiment_name}
    assert another_run(default) == "another experiment_name (or output_dir)"
    outright = load_recipe_checked(recipe, [f"output_dir={tmp_path / 'out'}"]).cfg
    assert another_run(outright) == (
        "another output_dir (this recipe sets it outright: a new experiment_name would not move it)"
    )


def test_misspelt_key_gets_did_you_mean(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "trainer: {totl_train_steps: 5}"))
    assert "trainer.totl_train_steps" in p and "did you mean 'trainer.total_train_steps'" in p


def test_key_in_the_wrong_section_points_to_the_right_one(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "algorithm: {lr: 0.1}"))
    assert "algorithm.lr" in p and "trainer.lr" in p


def test_wrong_type_names_field_and_value(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "trainer: {total_train_steps: many}"))
    assert p.startswith("trainer.total_train_steps") and "expected int" in p and "'many'" in p


def test_bool_is_not_an_int(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "trainer: {micro_batch_size: true}"))
    assert "trainer.micro_batch_size" in p and "expected int" in p


def test_missing_required_field(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "")
    text = Path(path).read_text().replace("experiment_name: t\n", "")
    Path(path).write_text(text)
    problems = problems_of(path)
    assert any(p.startswith("experiment_name: required field is missing") for p in problems)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    body = """
    trainer: {lr: fast, zero_stag: 2}
    weight: {sync_mode: asynchronous}
    """
    problems = problems_of(write_recipe(tmp_path, body))
    assert len(problems) == 3, problems
    joined = "\n".join(problems)
    assert "trainer.lr" in joined and "trainer.zero_stag" in joined
    assert "weight.sync_mode: 'asynchronous' is not one of sync, batch-async, fully-async" in joined


def test_missing_data_file_names_the_file(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "data.data_files=[nope.jsonl]")
    assert p.startswith("data.data_files") and "'nope.jsonl' does not exist" in p


@pytest.mark.parametrize("override", ["trainer.lr=inf", "rollout_worker.temperature=nan"])
def test_a_number_that_is_not_finite_is_refused(tmp_path: Path, override: str) -> None:
    # nan and inf pass a ">= 0" check; a run with them trains non-finite weights
    field, value = override.split("=")
    (p,) = problems_of(write_recipe(tmp_path, ""), override)
    assert p == f"{field}: expected a finite number, got {value}"


def test_missing_file_names_each_folder_looked_in_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = write_recipe(tmp_path, "")
    monkeypatch.chdir(tmp_path)  # the working directory is the recipe's folder
    (p,) = problems_of(recipe, "data.data_files=[nope.jsonl]")
    assert f"(relative paths are looked up in {tmp_path.resolve()})" in p, p


def test_batch_size_not_a_multiple_of_group_size(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "trajectory_pool.batch_size=10")
    assert "batch_size (10) must be a multiple of group_size (4)" in p


def test_dynamic_sampling_needs_groups(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, "")
    (p,) = problems_of(
        recipe,
        "algorithm.filter_zero_variance_groups=true",
        "rollout_worker.group_size=1",
        "algorithm.advantage_estimator=reinforce_plus_plus",  # (grpo: a problem of its own)
    )
    assert p.startswith("algorithm.filter_zero_variance_groups needs groups of >= 2")
    load_recipe_checked(recipe, ["algorithm.filter_zero_variance_groups=true"])  # groups of 4


@pytest.mark.parametrize(
    ("old", "new", "value"),
    [
        ("data.rollout_repeat_n=4", "rollout_worker.group_size", 4),
        ("trajectory_pool.group_size=4", "rollout_worker.group_size", 4),
        (
            "rollout_worker.evaluator_module_path=evaluator.py:Good",
            "rollout_worker.evaluator",
            "evaluator.py:Good",
        ),
        ("+rollout_worker.num_workers=3", "rollout_worker.max_groups_in_flight", 3),
        ("+trainer.save_freq=5", "trainer.save_every", 5),
        ("+validate.freq=5", "validate.every", 5),
    ],
)
def test_renamed_key_names_the_new_key(tmp_path: Path, old: str, new: str, value: object) -> None:
    # The old key still works (its value lands on the new key), with one
    # deprecation line that names the new key.
    body = "validate: {data_files: [train.jsonl]}"  # validating every N steps needs data
    recipe = load_recipe_checked(write_recipe(tmp_path, body), [old])
    key = old.lstrip("+").split("=", 1)[0]
    assert recipe.deprecations == (
        f"{key} is deprecated: set {new} (the old key still works for now)",
    )
    assert OmegaConf.select(recipe.cfg, new) == value


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("+rollout_worker.custom_rollout_worker_module_path=w.py", "rollout_worker.custom_worker"),
        ("+rollout_worker.custom_rollout_worker_class_name=W", "rollout_worker.custom_worker"),
        ("trainer.custom_trainer_module_path=t.py", "trainer.custom_trainer"),
        ("+trainer.custom_trainer_class_name=T", "trainer.custom_trainer"),
    ],
)
def test_half_of_an_old_pair_names_the_new_key(tmp_path: Path, old: str, new: str) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), old)
    key = old.lstrip("+").split("=", 1)[0]
    assert p.startswith(f"{new}: {key} is set but "), p
    assert f"set {new} ('path/to/file.py:ClassName'" in p


def test_structure_problems_do_not_stop_the_checks(tmp_path: Path) -> None:
    problems = problems_of(
        write_recipe(tmp_path, ""),
        "trainer.lr=fast",
        "trainer.offload_param=true",
        "rollout_worker.evaluator=nope.py:Good",
    )
    assert len(problems) == 3, problems
    assert problems[0].startswith("trainer.lr")
    assert "trainer.offload_param needs trainer.zero_stage: 3" in problems
    assert any(p.startswith("rollout_worker.evaluator") for p in problems)


def test_batch_async_needs_a_staleness_threshold(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "weight: {sync_mode: batch-async}"))
    assert p.startswith("weight.staleness_threshold: required")
    recipe = load_recipe_checked(
        write_recipe(tmp_path, "weight: {sync_mode: batch-async, staleness_threshold: 1}"),
        workspace=tmp_path,
    )
    assert recipe.cfg.weight.staleness_threshold == 1


def test_zero_settings_must_fit_together(tmp_path: Path) -> None:
    problems = problems_of(write_recipe(tmp_path, "trainer: {zero_stage: 1, offload_param: true}"))
    assert problems == ["trainer.offload_param needs trainer.zero_stage: 3"]


def test_tiny_model_heads_must_split_the_hidden_size(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path, "")
    (p,) = problems_of(recipe, "model.tiny.hidden_size=64", "model.tiny.num_heads=6")
    assert p == (
        "model.tiny.num_heads: 6 heads do not divide hidden_size 64; pick a divisor of it (e.g. 4)"
    )
    (p,) = problems_of(recipe, "model.tiny.num_heads=4", "model.tiny.num_kv_heads=3")
    assert p.startswith("model.tiny.num_kv_heads: 3 key/value heads do not divide num_heads 4")


def test_unknown_algorithm_name(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "algorithm: {advantage_estimator: gpro}"))
    assert p.startswith("algorithm.advantage_estimator") and "grpo" in p


def test_evaluator_file_missing(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "rollout_worker.evaluator=nope.py:Good")
    assert "rollout_worker.evaluator" in p and "'nope.py' not found" in p


def test_evaluator_class_missing_lists_the_classes_there(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "rollout_worker.evaluator=evaluator.py:Bad")
    assert "defines no 'Bad'" in p and "Good" in p


def test_evaluator_without_evaluate_method(tmp_path: Path) -> None:
    (p,) = problems_of(
        write_recipe(tmp_path, ""),
        "rollout_worker.evaluator=evaluator.py:NoEvaluate",
    )
    assert "NoEvaluate has no 'evaluate' method" in p


def test_evaluator_spec_without_class(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "rollout_worker.evaluator=evaluator.py")
    assert "is not 'path/to/file.py:ClassName'" in p


def test_evaluator_with_syntax_error(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "")
    (tmp_path / "broken.py").write_text("class X(:\n    pass\n")
    (p,) = problems_of(path, "rollout_worker.evaluator=broken.py:X")
    assert "syntax error in" in p and "broken.py:1" in p


def test_custom_worker_without_class(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, ""), "rollout_worker.custom_worker=workers.py")
    assert "is not 'path/to/file.py:ClassName'" in p


def test_duplicate_key_names_the_file_and_line(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "seed: 1\nseed: 2\n"))
    assert "r.yaml" in p and "duplicate key seed" in p


def test_env_interpolation_with_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_recipe(tmp_path, "project_name: ${oc.env:NEXRL_TEST_PROJECT,fallback}")
    assert load_recipe_checked(path, workspace=tmp_path).cfg.project_name == "fallback"
    monkeypatch.setenv("NEXRL_TEST_PROJECT", "from-env")
    assert load_recipe_checked(path, workspace=tmp_path).cfg.project_name == "from-env"


def test_broken_interpolation_names_the_field(tmp_path: Path) -> None:
    (p,) = problems_of(write_recipe(tmp_path, "project_name: ${nowhere.key}"))
    assert p.startswith("project_name: cannot resolve")


def test_recipe_inherits_a_file_from_its_own_folder(tmp_path: Path) -> None:
    (tmp_path / "common.yaml").write_text("seed: 7\ntrainer: {lr: 0.5}\n")
    path = write_recipe(tmp_path, "")
    Path(path).write_text(
        Path(path)
        .read_text()
        .replace("defaults: [nexrl_base, _self_]", "defaults: [nexrl_base, common, _self_]")
    )
    cfg = load_recipe_checked(path, workspace=tmp_path).cfg
    assert cfg.seed == 7 and cfg.trainer.lr == 0.5


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: {lr: [\n")
    (p,) = problems_of(str(bad))
    assert "bad.yaml" in p


@pytest.mark.parametrize(
    "args",
    [
        [DEFAULT, "trainer.lr=fast"],
        [DEFAULT, "trainer.nope=1"],
        [DEFAULT, "+trainer.nope=1"],
        [DEFAULT, "weight.sync_mode=batch-async"],
        [DEFAULT, "trajectory_pool.batch_size=100"],
        [DEFAULT, "rollout_worker.evaluator=missing.py:X"],
        [DEFAULT, "data.data_files=[missing.parquet]"],
        [DEFAULT, "cluster.type=slurmm"],
        [DEFAULT, "seed="],
        [DEFAULT, "trainerr.lr=1"],
        [DEFAULT, "trainer.lr"],
        ["recipes/max_digit/missing.yaml"],
        ["recipes/max_digit/evaluator.py"],
    ],
)
def test_cli_reports_mistakes_with_exit_2_and_no_traceback(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err  # one line
    assert "Traceback" not in err


def test_custom_worker_that_cannot_run_an_episode(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "")
    (tmp_path / "workers.py").write_text(
        "from nexrl.rollout.worker.base import BaseRolloutWorker\n"
        "class Empty(BaseRolloutWorker):\n    pass\n"
        "class NotAWorker:\n    async def rollout(self, item):\n        return []\n"
        "class SyncAgent(BaseRolloutWorker):\n    def run_agent(self, item):\n        pass\n"
    )
    for name, expected in (
        ("Empty", "implements neither run_agent"),
        ("NotAWorker", "is not a subclass of BaseRolloutWorker"),
        ("SyncAgent", "SyncAgent.run_agent must be `async def` (the rollout task awaits it)"),
    ):
        (p,) = problems_of(path, f"rollout_worker.custom_worker=workers.py:{name}")
        assert p.startswith("rollout_worker.custom_worker:") and expected in p


def test_bad_warm_start_demonstrations_name_the_field_file_and_line(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "demos.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}\n'
        '{"messages": [{"role": "user", "content": "hi"}]}\n'
    )
    field = "model.tiny.warm_start.data_files"
    recipe = write_recipe(tmp_path, "")
    (p,) = problems_of(recipe, f"{field}=[{tmp_path / 'demos.jsonl'}]")
    assert p.startswith(f"{field}: ") and "demos.jsonl:2: no assistant message" in p
    (p,) = problems_of(recipe, f"{field}=[nowhere.jsonl]")
    assert p.startswith(f"{field}: 'nowhere.jsonl' does not exist")
    # with model.path the tiny model is not built: its warm start is not checked (or run)
    load_recipe_checked(
        recipe, [f"{field}=[{tmp_path / 'demos.jsonl'}]", f"model.path={tiny_model_dir}"]
    )


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "dr_grpo"])
def test_groups_of_one_with_a_group_relative_estimator_are_refused(estimator: str) -> None:
    """GRPO & co. compare a prompt's samples: with one sample a prompt every advantage is
    0 (the run would train on nothing); the check asks the estimator itself."""
    over = ["rollout_worker.group_size=1", f"algorithm.advantage_estimator={estimator}"]
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(DEFAULT, over)
    (problem,) = info.value.problems
    assert problem.startswith(
        "rollout_worker.group_size: 1 gives every sample advantage 0 with "
        f"algorithm.advantage_estimator {estimator!r}"
    )
    assert "use group_size >= 2" in problem
    # an estimator with a batch baseline learns from groups of one
    load_recipe_checked(DEFAULT, [over[0], "algorithm.advantage_estimator=reinforce_plus_plus"])


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainerr.lr=1", "override trainerr.lr: the recipe has no section or field 'trainerr'; "
         "did you mean 'trainer'?"),
        ("experiment_nam=x", "override experiment_nam: the recipe has no section or field "
         "'experiment_nam'; did you mean 'experiment_name'?"),
        ("trainer.lr", "Error parsing override 'trainer.lr'; missing EQUAL at '<EOF>'"),
    ],
)  # fmt: skip
def test_a_misspelt_override_names_the_key_and_the_closest_section(
    override: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not Hydra's "To append to your config use +trainerr.lr=1" (adding the typo)."""
    assert main([DEFAULT, override, "--check"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {DEFAULT}: {expected}"), line
    assert "+trainerr" not in line
