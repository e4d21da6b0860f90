"""``mode: sft``: what the recipe check asks of an SFT-from-data recipe, before any cluster."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked

SFT = "recipes/max_digit_sft/sft_tiny.yaml"


def test_sft_needs_no_evaluator_but_rl_does() -> None:
    assert load_recipe_checked(SFT).cfg.mode == "sft"  # the recipe names no evaluator
    with pytest.raises(RecipeError, match=r"rollout_worker\.evaluator: required field"):
        load_recipe_checked(SFT, ["mode=rl", "trainer.type=self_hosted_grpo"])


def test_sft_needs_the_sft_trainer() -> None:
    with pytest.raises(RecipeError) as err:
        load_recipe_checked(SFT, ["trainer.type=self_hosted_grpo"])
    assert err.value.problems == [
        "trainer.type: mode sft trains with cross-entropy; set trainer.type: self_hosted_sft "
        "(got 'self_hosted_grpo')"
    ]


def test_a_bad_conversation_row_is_one_line_naming_field_file_row_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = tmp_path / "train.jsonl"
    shutil.copy("recipes/max_digit_sft/data/train.jsonl", train)
    with train.open("a") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "max 1 2 3"}]}) + "\n")
    val = tmp_path / "val.jsonl"
    val.write_text("{not json\n")
    code = main([SFT, "--check", f"data.data_files=[{train}]", f"validate.data_files=[{val}]"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"data.data_files: {train}:211: no assistant message to learn from" in err
    assert f"validate.data_files: {val}:1: not valid JSON" in err
