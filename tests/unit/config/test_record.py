"""config.yaml, the recipe a run folder records, and the settings a resume changed."""

from __future__ import annotations

from omegaconf import OmegaConf

from nexrl.core.config.record import changed_fields, recorded_yaml
from nexrl.driver.recipe import load_recipe_checked

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"


def test_changed_fields_name_each_leaf_old_and_new() -> None:
    old = "trainer:\n  lr: 0.003\n  steps: 2\ndata:\n  files: [a, b]\nname: x\n"
    new = "trainer:\n  lr: 0.001\n  steps: 2\ndata:\n  files: [a]\nextra: 1\nname: x\n"
    assert changed_fields(old, new) == [
        "data.files: ['a', 'b'] -> ['a']",
        "extra: (unset) -> 1",
        "trainer.lr: 0.003 -> 0.001",
    ]
    assert changed_fields(new, new) == []


def test_the_recorded_recipe_against_itself_and_an_override() -> None:
    base = load_recipe_checked(RECIPE, [])
    other = load_recipe_checked(RECIPE, ["trainer.lr=0.001", "rollout_worker.group_size=4"])
    assert changed_fields(recorded_yaml(base.cfg), recorded_yaml(base.cfg)) == []
    assert changed_fields(recorded_yaml(base.cfg), recorded_yaml(other.cfg)) == [
        "rollout_worker.group_size: 8 -> 4",
        "trainer.lr: 0.003 -> 0.001",
    ]
    assert OmegaConf.create(recorded_yaml(other.cfg)).trainer.lr == 0.001
