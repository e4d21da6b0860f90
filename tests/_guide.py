"""docs/train-your-own-task.md read by its tests: its code blocks, its command lines,
and a ``task`` fixture that runs the guide's scaffold command and data script in a
scratch folder (the unit tier checks the scaffold and ``--check``; the e2e tier
runs the training command)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nexrl.driver.cli.train import main

__all__ = ["GUIDE", "TRAIN", "commands", "guide_blocks", "task", "train_cli"]

GUIDE = Path("docs/train-your-own-task.md").resolve()  # the tests chdir to a scratch folder
TRAIN = "./pants run src/python/nexrl:train -- "


def guide_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", GUIDE.read_text(), re.S)


def commands(prefix: str) -> list[str]:
    """The guide's indented command lines that start with ``prefix``."""
    lines = [line[4:] for line in GUIDE.read_text().splitlines() if line.startswith("    ")]
    return [line for line in lines if line.startswith(prefix)]


def train_cli(command: str) -> int:
    """Run a ``./pants run src/python/nexrl:train -- ...`` line of the guide in-process."""
    assert command.startswith(TRAIN), command
    return main(shlex.split(command[len(TRAIN) :]))


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch checkout: the guide's scaffold command and data script run in it."""
    monkeypatch.chdir(tmp_path)
    (scaffold,) = [c for c in commands(TRAIN) if "--new-task" in c]
    assert train_cli(scaffold) == 0
    (make_data,) = commands("python3 ")
    python = shutil.which("python3") or sys.executable
    subprocess.run([python, *shlex.split(make_data)[1:]], check=True)
    return tmp_path / "recipes" / "next_digit"
