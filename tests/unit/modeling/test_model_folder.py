"""A ``model.path`` folder that cannot work is refused before anything starts, in one
line naming the file and the fix (the recipe check, so ``--check`` and ``train``).

Each case is a real tiny model folder (``save_pretrained`` output) damaged the way a
user's copy gets damaged: a torn config, a model saved without its tokenizer, a base
model without a chat template, a half-copied weights file.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nexrl.driver.cli.train import main
from nexrl.driver.modeling.folder import ModelSetupError
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"
SFT = "recipes/max_digit_sft/sft_tiny.yaml"


@pytest.fixture
def folder(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A fresh copy of a working tiny model folder, to damage."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


def _refused(recipe: str, model: Path, capsys: pytest.CaptureFixture[str], *more: str) -> str:
    """``--check`` and ``train`` both exit 2 with the same one line; nothing else."""
    for flags in (["--check"], []):
        assert main([recipe, f"model.path={model}", *more, *flags]) == 2
        out, err = capsys.readouterr()
        assert "recipe is valid" not in out and "Traceback" not in err
        (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
        assert f"model.path: {model}" in line or f"model.path: the tokenizer in {model}" in line
    return line


def _damage(name: str, folder: Path) -> str:
    """Damage ``folder`` as ``name`` says; the words the refusal must contain."""
    if name == "torn config":
        (folder / "config.json").write_text('{"model_type": "qwen2", "hidden')
        return "config.json cannot be read as JSON"
    if name == "unknown architecture":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "qwen9"}))
        return "config.json cannot be loaded by transformers"
    if name == "no weights":
        (folder / "model.safetensors").unlink()
        return "has no weights (model.safetensors"
    if name == "half-copied weights":
        weights = folder / "model.safetensors"
        os.truncate(weights, weights.stat().st_size // 2)
        return "model.safetensors is damaged"
    if name == "no tokenizer":
        # (transformers then builds an empty Qwen2 tokenizer: one token, text -> no ids)
        for f in folder.glob("tokenizer*"):
            f.unlink()
        return "has no tokenizer files"
    assert name == "another model's tokenizer"
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 8}))
    return "tokens but the model (model.path config.json vocab_size) embeds 8"


@pytest.mark.parametrize(
    "damage",
    [
        "torn config",
        "unknown architecture",
        "no weights",
        "half-copied weights",
        "no tokenizer",
        "another model's tokenizer",
    ],
)
def test_a_damaged_model_folder_is_one_line_naming_the_file(
    damage: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = _damage(damage, folder)
    assert words in _refused(DEFAULT, folder, capsys)


def test_the_driver_refuses_it_too_when_the_folder_breaks_after_the_check(
    folder: Path, tmp_path: Path
) -> None:
    cfg = load_recipe_checked(DEFAULT, [f"model.path={folder}"]).cfg
    _damage("half-copied weights", folder)
    with pytest.raises(ModelSetupError, match=r"model\.safetensors is damaged"):
        prepare_model(cfg, tmp_path / "run")


def test_no_chat_template_is_refused_where_the_run_needs_one(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in workers send chat requests and SFT encodes conversations: both need
    the template. An engine with its own (base_urls) or a custom worker does not."""
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))

    line = _refused(DEFAULT, folder, capsys)
    assert "has no chat template, and rollout_worker.type=simple sends chat requests" in line
    assert "chat_template.jinja" in line  # the fix
    line = _refused(SFT, folder, capsys)
    assert "has no chat template, and SFT encodes each conversation with it" in line

    base_urls = "service.inference_service.base_urls=[http://127.0.0.1:9/v1]"
    load_recipe_checked(DEFAULT, [f"model.path={folder}", base_urls])


def test_a_working_folder_passes(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([DEFAULT, f"model.path={folder}", "--check"]) == 0
    assert "recipe is valid" in capsys.readouterr().out
