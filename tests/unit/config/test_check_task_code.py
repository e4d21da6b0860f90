"""``--check`` runs the task's code before any cluster starts: the evaluator and a custom
worker are instantiated, the first rows of every data file are read against what they
need, and the evaluator scores the recipe's example answer. Each problem is one line
naming the field, the file and the row."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked

TASK = """
from nexrl.rollout_worker import EvaluationRunResult, Evaluator, SimpleRolloutWorker


class Scored(Evaluator):
    required_fields = ("answer",)

    def evaluate(self, data, evaluation_target):
        return EvaluationRunResult(reward=float(evaluation_target.final_answer == data["answer"]))


class NoEvaluate:
    required_fields = ("answer",)


class Exploding(Scored):
    def __init__(self):
        raise RuntimeError("no API key")


class RaisesOnScore(Scored):
    def evaluate(self, data, evaluation_target):
        return EvaluationRunResult(reward=float(data["answer"]))


class BoolMetric(Scored):
    def evaluate(self, data, evaluation_target):
        exact = evaluation_target.final_answer == data["answer"]
        return EvaluationRunResult(reward=float(exact), metrics={"exact": exact})


class Hangs(Scored):
    def evaluate(self, data, evaluation_target):
        import time

        time.sleep(3600)


class ReturnsAFloat(Scored):
    def evaluate(self, data, evaluation_target):
        return 1.0


class Worker(SimpleRolloutWorker):
    required_fields = ("hint",)

    def format_task_query(self, data_item):
        return [{"role": "user", "content": data_item["prompt"] + " " + data_item["hint"]}]


class BrokenWorker(SimpleRolloutWorker):
    def __init__(self, client, evaluator, sampling, prompt_key="prompt"):
        raise ValueError("needs a tool server")


class NoHooks(SimpleRolloutWorker.__mro__[1]):  # BaseRolloutWorker without run_agent/rollout
    pass
"""


def rows(path: Path, items: Sequence[Mapping[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in items))
    return str(path)


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    rows(tmp_path / "train.jsonl", [{"prompt": "a", "answer": "b", "hint": "h"}] * 3)
    rows(tmp_path / "test.jsonl", [{"prompt": "a", "answer": "b", "hint": "h"}])
    path = tmp_path / "r.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            defaults: [nexrl_base, _self_]
            experiment_name: t
            model: {tiny: {vocab: [a, b]}}
            data: {data_files: [train.jsonl]}
            rollout_worker: {evaluator: "task.py:Scored", group_size: 4, example_answer: b}
            trajectory_pool: {key_list: [group_id], batch_size: 8}
            validate: {every: 5, data_files: [test.jsonl]}
            """
        )
    )
    return path


def problems_of(recipe: Path, *overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe, list(overrides))
    return info.value.problems


def test_a_recipe_whose_task_code_runs_passes(recipe: Path) -> None:
    load_recipe_checked(recipe, ["rollout_worker.custom_worker=task.py:Worker"])


def test_a_data_row_without_the_evaluators_field_names_file_row_and_field(
    recipe: Path, tmp_path: Path
) -> None:
    rows(tmp_path / "train.jsonl", [{"prompt": "a", "answer": "b"}, {"prompt": "a", "label": "b"}])
    rows(tmp_path / "test.jsonl", [{"prompt": "a", "solution": "b"}])
    assert problems_of(recipe) == [
        "data.data_files: train.jsonl, line 2: no 'answer' field, which "
        "rollout_worker.evaluator reads (its required_fields); fields: ['label', 'prompt']",
        "validate.data_files: test.jsonl, line 1: no 'answer' field, which "
        "rollout_worker.evaluator reads (its required_fields); fields: ['prompt', 'solution']",
    ]


def test_an_empty_data_file_is_named(recipe: Path, tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("\n\n")  # blank lines only
    assert problems_of(recipe) == [
        "data.data_files: train.jsonl holds no rows (an empty file); add the prompts, one "
        "JSON object per line, or leave the file out of the list"
    ]


def test_a_data_row_without_the_prompt_or_a_workers_field(recipe: Path, tmp_path: Path) -> None:
    rows(
        tmp_path / "train.jsonl", [{"question": "a", "answer": "b"}, {"prompt": "a", "answer": "b"}]
    )
    (p1, p2) = problems_of(recipe, "rollout_worker.custom_worker=task.py:Worker")
    assert p1.startswith("data.data_files: train.jsonl, line 1: no 'prompt' field")
    assert p2.startswith(
        "data.data_files: train.jsonl, line 2: no 'hint' field, which "
        "rollout_worker.custom_worker reads"
    )


def test_a_worker_class_in_rollout_worker_type_is_named_by_that_field(
    recipe: Path, tmp_path: Path
) -> None:
    """``rollout_worker.type: file.py:Class`` (the newer way): its errors name that field,
    not ``rollout_worker.custom_worker``, which the recipe does not have."""
    rows(tmp_path / "train.jsonl", [{"prompt": "a", "answer": "b"}])
    (p1,) = problems_of(recipe, "rollout_worker.type=task.py:Worker")
    assert p1.startswith(
        "data.data_files: train.jsonl, line 1: no 'hint' field, which rollout_worker.type "
        "reads (its required_fields)"
    ), p1
    (p2,) = problems_of(recipe, "rollout_worker.type=task.py:BrokenWorker")
    assert p2.startswith("rollout_worker.type: BrokenWorker(...) failed"), p2


def test_an_evaluator_that_hangs_on_the_example_answer_is_named_not_waited_for(
    recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It hung --check and the run's start for good, without a line."""
    from nexrl.rollout_worker import dry_run

    monkeypatch.setattr(dry_run, "EXAMPLE_TIMEOUT_S", 0.5)
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:Hangs")
    assert p.startswith(
        "rollout_worker.example_answer: Hangs.evaluate('b') did not return within 0.5s on "
        "train.jsonl, line 1 ("
    ), p
    assert p.endswith(
        "an evaluator that hangs stalls every rollout; fix it, or set "
        "rollout_worker.example_answer: null to skip this check"
    ), p


def test_a_mistyped_prompt_key_is_one_line_per_file(recipe: Path) -> None:
    """Every row lacks the field data.prompt_key names: one line naming the rows, not one
    line per row (it was five identical lines, one per row checked)."""
    assert problems_of(recipe, "data.prompt_key=promt") == [
        "data.data_files: train.jsonl: 3 rows (line 1, line 2, line 3): no 'promt' field "
        "(fields: ['answer', 'hint', 'prompt']); set data.prompt_key to the field holding "
        "the prompt",
        "validate.data_files: test.jsonl, line 1: no 'promt' field (fields: ['answer', "
        "'hint', 'prompt']); set data.prompt_key to the field holding the prompt",
    ]


def test_an_evaluator_without_evaluate_or_with_a_failing_constructor(recipe: Path) -> None:
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:NoEvaluate")
    assert p.startswith("rollout_worker.evaluator: NoEvaluate has no 'evaluate' method (")
    assert "task.py" in p and "\n" not in p
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:Exploding")
    assert p.startswith("rollout_worker.evaluator: Exploding() failed (")
    assert p.endswith("task.py): RuntimeError: no API key")


def test_a_worker_whose_constructor_fails_or_that_lacks_the_hooks(recipe: Path) -> None:
    (p,) = problems_of(recipe, "rollout_worker.custom_worker=task.py:BrokenWorker")
    assert p.startswith("rollout_worker.custom_worker: BrokenWorker(...) failed (")
    assert p.endswith("task.py): ValueError: needs a tool server")
    (p,) = problems_of(recipe, "rollout_worker.custom_worker=task.py:NoHooks")
    assert p.startswith("rollout_worker.custom_worker: NoHooks implements neither run_agent")


def test_the_example_answer_is_scored_on_the_first_training_row(recipe: Path) -> None:
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:RaisesOnScore")
    assert p.startswith(
        "rollout_worker.example_answer: RaisesOnScore.evaluate('b') failed on train.jsonl, line 1 ("
    )
    assert p.endswith("ValueError: could not convert string to float: 'b'")
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:ReturnsAFloat")
    assert p.endswith("TypeError: returned float, not an EvaluationRunResult")
    # A metric that is no number (a bool, a string) fails here, not in every rollout.
    (p,) = problems_of(recipe, "rollout_worker.evaluator=task.py:BoolMetric")
    assert p.endswith(
        "TypeError: EvaluationRunResult.metrics['exact'] must be a float, got True "
        "(a bool: wrap it in float())"
    )
    # no example answer: no dry run
    load_recipe_checked(
        recipe,
        ["rollout_worker.evaluator=task.py:RaisesOnScore", "rollout_worker.example_answer=null"],
    )


def test_the_cli_prints_them_with_exit_2(
    recipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows(tmp_path / "train.jsonl", [{"prompt": "a"}])
    assert main([str(recipe), "--check"]) == 2
    err = capsys.readouterr().err
    assert "train.jsonl, line 1: no 'answer' field" in err and "Traceback" not in err


def test_a_valid_recipe_shows_what_the_example_answer_scores(
    recipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A successful ``--check`` shows the example answer's score (and the evaluator's
    metrics), so a reward that is not the one expected is seen before any run."""
    assert main([str(recipe), "--check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{recipe}: recipe is valid",
        "rollout_worker.example_answer 'b' on train.jsonl, line 1: reward 1",
    ]
    assert main([str(recipe), "--check", "rollout_worker.example_answer=wrong"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("line 1: reward 0")


def test_all_rows_reads_every_row(
    recipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad row past the first 5: ``--check`` does not read it, ``--check --all-rows``
    names it (file and line); the rows missing a field are one line per file."""
    good = {"prompt": "a", "answer": "b"}
    rows(tmp_path / "train.jsonl", [good] * 6 + [{"prompt": "a"}] * 12 + [good] * 2)
    assert main([str(recipe), "--check"]) == 0
    capsys.readouterr()
    try:
        assert main([str(recipe), "--check", "--all-rows"]) == 2
    finally:
        from nexrl.rollout.worker.dry_run import check_all_rows

        check_all_rows(False)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "no 'answer'" in x]
    assert line.endswith(
        "data.data_files: train.jsonl: 12 rows (line 7, line 8, line 9, line 10, line 11, "
        "line 12, line 13, line 14, line 15, line 16, ... and 2 more): no 'answer' field, "
        "which rollout_worker.evaluator reads (its required_fields); fields: ['prompt'] "
        "(in line 7)"
    ), line


def test_a_misspelt_file_path_gets_a_did_you_mean(recipe: Path, tmp_path: Path) -> None:
    """A data file or an evaluator file whose name (or folder) is misspelt: the problem
    line names the existing path it probably means, written as the recipe wrote it."""
    (tmp_path / "data").mkdir()
    rows(tmp_path / "data" / "train.jsonl", [{"prompt": "a", "answer": "b"}] * 3)
    problems = problems_of(
        recipe,
        "data.data_files=[dta/trian.jsonl]",
        f"validate.data_files=[{tmp_path}/tset.jsonl]",
        "rollout_worker.evaluator=tsak.py:Scored",
    )
    assert problems[0].startswith("data.data_files: 'dta/trian.jsonl' does not exist")
    assert problems[0].endswith("; did you mean 'data/train.jsonl'?")
    assert problems[1].endswith(f"; did you mean '{tmp_path}/test.jsonl'?")
    (evaluator,) = [p for p in problems if p.startswith("rollout_worker.evaluator")]
    assert evaluator.endswith("; did you mean 'task.py'?")
    far = problems_of(recipe, "data.data_files=[nothing_like_it.jsonl]")
    assert far[0].endswith("; fix the path or create the file")
