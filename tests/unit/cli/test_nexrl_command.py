"""The ``nexrl`` command (``nexrl.driver.cli.main``) and NexRL's own flags on ``nexrl train``
(``nexrl.driver.cli.flags``), through ``main`` with ``--print-config`` (the recipe as the run
would use it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import nexrl
from nexrl.driver.cli.main import main

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"


def _config(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--print-config"]) == 0
    return dict(yaml.safe_load(capsys.readouterr().out))


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"nexrl {nexrl.__version__}\n"


def test_train_is_implied_and_the_positional_form_is_the_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain = _config(capsys, "train", RECIPE, "seed=7")
    assert plain["seed"] == 7
    assert _config(capsys, "-c", RECIPE, "seed=7") == plain  # NexRL's form
    assert _config(capsys, RECIPE, "seed=7") == plain


def test_nexrl_flags_become_recipe_values(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(
        capsys,
        "-c", RECIPE, "-m", "training-service", "-t", "try2",
        "--inference-url", "http://127.0.0.1:8000/v1", "--inference-url", "http://h2:8000/v1",
    )  # fmt: skip
    assert cfg["trainer"]["mode"] == "training-service"
    assert cfg["experiment_name"] == "max_digit_tiny-try2"
    assert cfg["output_dir"] == "runs/max_digit_tiny-try2"  # the run folder follows the name
    assert cfg["service"]["inference_service"]["base_urls"] == [
        "http://127.0.0.1:8000/v1",
        "http://h2:8000/v1",
    ]


def test_an_explicit_override_wins_over_a_flag_and_the_tag_follows_a_renamed_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _config(
        capsys, "-c", RECIPE, "-m", "training-service", "trainer.mode=self-hosted",
        "experiment_name=mine", "-t", "a",
    )  # fmt: skip
    assert cfg["trainer"]["mode"] == "self-hosted"
    assert cfg["experiment_name"] == "mine-a"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["trian", RECIPE],
            "'trian' is neither a command (train, dashboard, new-task, training-service) nor a recipe",
        ),
        ([RECIPE, "-c", RECIPE], "two recipes"),
        (["-c", RECIPE, "--inference-url", "127.0.0.1:8000"], "starts with http:// or https://"),
        (["-c", RECIPE, "-t", "a b"], "a tag is a suffix for run and job names"),
        (["-c", RECIPE, "-m", "selfhosted"], "invalid choice: 'selfhosted'"),
        (["new-task"], "usage: nexrl new-task FOLDER"),
        (  # (it said "--sbatch runs the driver as a Slurm job", a flag not given)
            [RECIPE, "--dry-run"],
            "--dry-run prints what a cluster would be given: the job script with --sbatch "
            "(cluster.type=slurm), or the Dask resources with cluster.type=kubernetes; a "
            "local run has none (to check the recipe: --check)",
        ),
    ],
)
def test_mistakes_are_one_clear_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    assert code == 2
    assert said in capsys.readouterr().err


def test_new_task_scaffolds_and_names_the_next_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new-task", "my_task"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "my_task" / "my_task.yaml").is_file()
    # not installed here (the monorepo): the next step is the ./pants form
    assert "then ./pants run src/python/nexrl:train -- my_task/my_task.yaml --check" in out
