"""Bad data rows anywhere in a data file, not only in the rows ``--check`` reads.

* A row that lacks a field the evaluator declares (``required_fields``) at line 300:
  ``--check`` (the first 5 rows) passes, ``--check --all-rows`` names file and line,
  and the run itself stops before it starts (``data.bad_rows=error``, exit 2) naming
  file and line.
* With ``data.bad_rows=skip``: each bad row is named (file, line) and counted in the
  summary; a row the evaluator cannot evaluate at all (it does not declare the field
  it reads, so the loader cannot know) is one ERROR line naming its file and line,
  and counted in the summary.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests import _launch
from tests.e2e._recipe import DATA, RECIPE, overrides, subprocess_env, train_rows

NOT_DECLARED = """
from nexrl.rollout_worker import EvaluationRunResult, Evaluator


class AnswerNotDeclared(Evaluator):  # reads 'answer' without declaring it
    def evaluate(self, data, evaluation_target):
        return EvaluationRunResult(reward=float(evaluation_target.final_answer == data["answer"]))
"""


def _data(path: Path, n: int, bad: dict[int, str]) -> Path:
    """The first ``n`` rows of the default recipe's data, line ``i`` replaced by ``bad[i]``."""
    lines = Path(DATA).read_text().splitlines()
    lines = (lines * (n // len(lines) + 1))[:n]
    for i, text in bad.items():
        lines[i - 1] = text
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(*args: str) -> subprocess.CompletedProcess[str]:
    return _launch.run(
        [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE, *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_bad_row_past_the_checked_rows_is_named_before_the_run_starts(tmp_path: Path) -> None:
    data = _data(tmp_path / "train.jsonl", 300, {300: '{"prompt": "max 1 2 3"}'})
    args = [*overrides(tmp_path / "run"), f"data.data_files=[{data}]"]
    assert _train(*args, "--check").returncode == 0  # the first 5 rows are fine
    every = _train(*args, "--check", "--all-rows")
    assert every.returncode == 2, every.stderr
    assert f"{data}, line 300: no 'answer' field, which rollout_worker.evaluator reads" in (
        every.stderr
    )
    run = _train(*args)
    assert run.returncode == 2, run.stderr[-3000:]
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("error:")]
    assert f"{data}, line 300: no 'answer' field, which rollout_worker.evaluator reads" in line
    assert "data.bad_rows=skip" in line
    assert "Dask dashboard" not in run.stderr and "Traceback" not in run.stderr


def test_bad_rows_are_named_and_counted_and_an_unevaluable_row_is_an_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    evaluator = tmp_path / "not_declared.py"
    evaluator.write_text(NOT_DECLARED)
    data = _data(tmp_path / "train.jsonl", 8, {6: '{"prompt": "max 1 2 3"}', 7: "{broken"})
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE,
        overrides(
            out,
            f"data.data_files=[{data}]",
            "data.bad_rows=skip",
            f"rollout_worker.evaluator={evaluator}:AnswerNotDeclared",
            steps=2,
        ),
    )
    with caplog.at_level(logging.WARNING, logger="nexrl"):
        assert Controller(recipe, progress=False).run().steps == 2
    skipped = [r for r in caplog.records if "skipped 1 bad rows" in r.getMessage()]
    assert len(skipped) == 1 and f"{data}, line 7: invalid JSON" in skipped[0].getMessage()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(" could not")[0] for r in errors] == [
        f"data row {data}, line 6"
    ], [r.getMessage() for r in errors]
    assert "KeyError: 'answer'" in errors[0].getMessage()
    assert (
        f"data row {data}, line 6 could not be evaluated"
        in (out / "logs" / "driver.log").read_text()
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bad_rows_skipped"] == 1 and summary["rows_not_evaluated"] == 1
    assert train_rows(out)[-1]["data/bad_rows_skipped"] == 1
