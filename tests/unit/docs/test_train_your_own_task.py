"""docs/train-your-own-task.md runs as written (all but the training run, which
tests/e2e/test_train_your_own_task.py runs): the scaffold command writes exactly the
files the guide shows, the data script, the worker and ``--check`` work, and the
evaluator gives the partial credit the guide describes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.plugins import load_object
from nexrl.driver.cli.train import main
from nexrl.rollout_worker import BaseEvaluationTarget
from tests._guide import GUIDE, TRAIN, commands, guide_blocks, task, train_cli

__all__ = ["task"]  # the fixture: the guide's scaffold and data script in a scratch folder


def test_the_scaffold_writes_the_files_the_guide_shows(task: Path) -> None:
    make_data, evaluator, *_ = guide_blocks("python")
    (recipe,) = guide_blocks("yaml")
    assert (task / "make_data.py").read_text() == make_data
    assert (task / "evaluator.py").read_text() == evaluator
    assert (task / "next_digit.yaml").read_text() == recipe
    train = (task / "data" / "train.jsonl").read_text().splitlines()
    assert len(train) == 200 and (task / "data" / "test.jsonl").exists()


def test_the_scaffold_never_overwrites(task: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (task / "evaluator.py").write_text("# mine\n")
    (scaffold,) = [c for c in commands(TRAIN) if "--new-task" in c]
    capsys.readouterr()
    assert train_cli(scaffold) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --new-task recipes/next_digit: ")
    assert "already exist(s); nothing was written" in err
    assert (task / "evaluator.py").read_text() == "# mine\n"
    assert main(["--new-task", "recipes/my-task"]) == 2
    assert "use letters, digits and '_'" in capsys.readouterr().err


def test_check_passes_with_and_without_the_guides_worker(task: Path) -> None:
    worker = [b for b in guide_blocks("python") if "class TaskWorker" in b]
    (task / "worker.py").write_text(worker[0])
    checks = [c for c in commands(TRAIN) if c.endswith("--check")]
    assert len(checks) == 2
    for command in checks:
        assert train_cli(command) == 0, command


def test_check_names_the_row_that_lacks_the_evaluators_field(
    task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (task / "data" / "train.jsonl").write_text('{"prompt": "after 4"}\n')
    (check,) = [c for c in commands(TRAIN) if c.endswith("next_digit.yaml --check")]
    assert train_cli(check) == 2
    shown = re.search(r"`(data\.data_files: recipes/next_digit.*?)`", GUIDE.read_text(), re.S)
    assert shown is not None
    assert " ".join(shown.group(1).split()) in capsys.readouterr().err


def test_the_evaluator_gives_partial_credit_and_metrics(task: Path) -> None:
    cls: Any = load_object(str(task / "evaluator.py"), "TaskEvaluator", [task], "t")
    row = {"prompt": "after 9", "answer": "0"}
    scores = {
        a: cls().evaluate(row, BaseEvaluationTarget(final_answer=a))
        for a in ("0", "5", "after", "")
    }
    assert {a: r.reward for a, r in scores.items()} == {"0": 1.0, "5": 0.2, "after": 0.0, "": 0.0}
    assert scores["5"].metrics == {"exact": 0.0, "is_digit": 1.0}
    assert scores["0"].metrics == {"exact": 1.0, "is_digit": 1.0}


def test_the_guide_is_linked_from_the_readme_index_and_user_guide() -> None:
    assert "docs/train-your-own-task.md" in Path("README.md").read_text()
    for doc in ("docs/index.md", "docs/user-guide.md"):
        assert "(train-your-own-task.md)" in Path(doc).read_text(), doc
