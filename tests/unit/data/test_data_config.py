"""DataConfig: every field documented, usable as an OmegaConf structured config."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue

from nexrl.core.config.sections.data import DataConfig
from nexrl.core.config.sections.rollout import RolloutWorkerConfig


def test_every_field_has_help_text() -> None:
    for f in dataclasses.fields(DataConfig):
        assert len(f.metadata.get("help", "")) > 20, f.name


def test_field_metadata_for_the_validator() -> None:
    meta = {f.name: f.metadata for f in dataclasses.fields(DataConfig)}
    assert meta["data_files"]["path"] is True
    assert meta["bad_rows"]["choices"] == ("error", "skip")
    assert meta["max_prompt_length"]["minimum"] == 1
    # samples per prompt: one group size for the loader and the pool
    rollout = {f.name: f for f in dataclasses.fields(RolloutWorkerConfig)}
    assert rollout["group_size"].metadata["minimum"] == 1 and rollout["group_size"].default == 8


def test_structured_config_requires_data_files_and_merges_overrides() -> None:
    base = OmegaConf.structured(DataConfig)
    with pytest.raises(MissingMandatoryValue):
        _ = base.data_files
    merged = OmegaConf.merge(base, {"data_files": ["a.parquet"], "total_epochs": 2})
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, DataConfig)
    assert (cfg.data_files, cfg.total_epochs) == (["a.parquet"], 2)
    assert (cfg.prompt_key, cfg.shuffle, cfg.seed, cfg.bad_rows) == ("prompt", True, 42, "error")
    assert cfg.max_samples is None and cfg.drop_last is False
