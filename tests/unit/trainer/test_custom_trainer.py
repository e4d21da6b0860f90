"""Trainer classes by type and custom trainers from a file: clear errors for every mistake."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.trainer import (
    SelfHostedGrpoTrainer,
    SelfHostedSftTrainer,
    load_custom_trainer,
    resolve_trainer_class,
)

GOOD = """
from nexrl.trainer import SelfHostedGrpoTrainer

class MyTrainer(SelfHostedGrpoTrainer):
    def prepare_batch(self, batch):
        batch, metrics = super().prepare_batch(batch)
        return batch, {**metrics, "custom/seen": 1.0}

class NotATrainer:
    pass

def make_trainer():
    pass
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "my_trainer.py").write_text(GOOD)
    (tmp_path / "agents" / "broken.py").write_text("def oops(:\n")
    (tmp_path / "agents" / "bad_import.py").write_text("import not_a_module_anywhere\n")
    return tmp_path


def _cfg(**kw: Any) -> TrainerConfig:
    return replace(TrainerConfig(), **kw)


def test_builtin_types() -> None:
    assert resolve_trainer_class(_cfg(type="self_hosted_grpo")) is SelfHostedGrpoTrainer
    assert resolve_trainer_class(_cfg(type="self_hosted_sft")) is SelfHostedSftTrainer


def test_unknown_type_suggests_the_closest() -> None:
    with pytest.raises(RecipeError, match=r"trainer.type.*did you mean 'self_hosted_grpo'"):
        resolve_trainer_class(_cfg(type="self_hosted_grp"))


def test_custom_class_loads_relative_to_the_roots(workspace: Path) -> None:
    cfg = _cfg(custom_trainer="agents/my_trainer.py:MyTrainer")
    cls = resolve_trainer_class(cfg, [workspace])
    assert cls.__name__ == "MyTrainer" and issubclass(cls, SelfHostedGrpoTrainer)


@pytest.mark.parametrize(
    ("path", "name", "message"),
    [
        (
            "agents/missing.py",
            "X",
            r"custom_trainer: file 'agents/missing.py' not found",
        ),
        (
            "agents/my_trainer.py",
            "Nope",
            r"defines no 'Nope'; classes defined there: MyTrainer, NotATrainer",
        ),
        (
            "agents/my_trainer.py",
            "NotATrainer",
            r"'NotATrainer' .* is a class that does not subclass nexrl.trainer.SelfHostedTrainer",
        ),
        (
            "agents/my_trainer.py",
            "make_trainer",
            r"'make_trainer' .* is a function that does not subclass",
        ),
        ("agents/my_trainer.py", None, r"custom_trainer: 'agents/my_trainer.py' is not"),
        ("agents/broken.py", "X", r"syntax error in .*broken.py:1"),
        ("agents/bad_import.py", "X", r"importing .*bad_import.py failed: ModuleNotFoundError"),
    ],
)
def test_loading_errors_name_the_field_file_and_fix(
    workspace: Path, path: str, name: str | None, message: str
) -> None:
    spec = path if name is None else f"{path}:{name}"
    with pytest.raises(RecipeError, match=message):
        load_custom_trainer(spec, [workspace])


def test_a_class_name_without_a_file() -> None:
    with pytest.raises(RecipeError, match=r"custom_trainer: 'MyTrainer' is not 'path/to/file.py"):
        resolve_trainer_class(_cfg(custom_trainer="MyTrainer"))


def test_a_class_from_a_module(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(workspace / "agents"))
    cls = resolve_trainer_class(_cfg(custom_trainer="my_trainer:MyTrainer"))
    assert cls.__name__ == "MyTrainer" and issubclass(cls, SelfHostedGrpoTrainer)


def test_a_custom_trainer_trains(workspace: Path, tiny_model_dir: Path, vocab_size: int) -> None:
    from tests.unit.trainer._helpers import make_batch, spec
    from tests.unit.trainer._plain_engine import plain_trainer

    trainer_cfg = {"custom_trainer": "agents/my_trainer.py:MyTrainer"}
    s = spec(tiny_model_dir, trainer=trainer_cfg, roots=(str(workspace),))
    trainer = plain_trainer(s)
    assert type(trainer).__name__ == "MyTrainer"
    metrics = trainer.train_step(make_batch(vocab_size))
    assert metrics["custom/seen"] == 1.0 and trainer.policy_version == 1
