"""``TrainerSpec.from_recipe``: the recipe sections a trainer needs, typed."""

from __future__ import annotations

from pathlib import Path

from nexrl.core.config.sections.algorithm import AlgorithmConfig
from nexrl.core.config.sections.trainer import TrainerConfig
from nexrl.driver.recipe import load_recipe_checked
from nexrl.trainer import TrainerSpec

ROOT = Path(__file__).resolve().parents[3]


def test_spec_from_the_default_recipe(tmp_path: Path) -> None:
    recipe = load_recipe_checked(
        ROOT / "recipes" / "max_digit" / "max_digit_tiny.yaml",
        [f"output_dir={tmp_path}"],
        workspace=ROOT,
    )
    spec = TrainerSpec.from_recipe(recipe.spec, model_path=tmp_path / "model", roots=recipe.roots)
    assert isinstance(spec.trainer, TrainerConfig) and isinstance(spec.algorithm, AlgorithmConfig)
    assert spec.trainer.lr == 3e-3 and spec.trainer.micro_batch_size == 128
    assert spec.algorithm.advantage_estimator == "grpo"
    assert spec.snapshot_dir == f"{tmp_path}/snapshots" and spec.keep_snapshots == 3
    assert spec.checkpoint_dir == str(tmp_path / "checkpoints")
    assert spec.resume_mode == "auto" and spec.model_path == str(tmp_path / "model")
    assert spec.roots[0] == str(ROOT)
