"""The cache of built tiny models (``nexrl.driver.modeling.cache``), through ``prepare_model``
as a run calls it: a second run with the same ``model.tiny`` copies the first's files
instead of building; anything the build depends on changes the entry; a damaged entry
is rebuilt, never copied; a cache that cannot be written costs only the build."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig

from nexrl.driver.modeling.cache import CACHE_ENV, MANIFEST, cache_root
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"
FILES = ("config.json", "model.safetensors", "tokenizer.json")


def _cfg(out: Path, *overrides: str) -> DictConfig:
    return load_recipe_checked(RECIPE, [f"output_dir={out}", *overrides]).cfg


def _bytes(model: Path) -> dict[str, bytes]:
    return {name: (model / name).read_bytes() for name in FILES}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def test_a_second_run_copies_the_first_runs_model(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert cache_root() == cache
    caplog.set_level(logging.INFO, logger="nexrl.driver.modeling.cache")
    first, _ = prepare_model(_cfg(tmp_path / "a"), tmp_path / "a")
    (entry,) = cache.iterdir()
    assert (entry / MANIFEST).is_file() and not caplog.records
    second, tok = prepare_model(_cfg(tmp_path / "b"), tmp_path / "b")
    assert second == tok == tmp_path / "b" / "model"
    assert _bytes(second) == _bytes(first)
    assert not (second / MANIFEST).exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"model: the tiny model from the cache ({entry})"
    ]
    # the same files as a build without the cache
    built, _ = prepare_model(_cfg(tmp_path / "c", "model.tiny.cache=false"), tmp_path / "c")
    assert _bytes(built) == _bytes(second)
    assert len(list(cache.iterdir())) == 1


def test_what_the_build_depends_on_keys_the_entry(tmp_path: Path, cache: Path) -> None:
    a, _ = prepare_model(_cfg(tmp_path / "a"), tmp_path / "a")
    b, _ = prepare_model(_cfg(tmp_path / "b", "model.tiny.seed=7"), tmp_path / "b")
    c, _ = prepare_model(_cfg(tmp_path / "c", "model.tiny.hidden_size=32"), tmp_path / "c")
    d, _ = prepare_model(
        _cfg(tmp_path / "d", "model.tiny.intermediate_size=96", "model.tiny.num_kv_heads=1"),
        tmp_path / "d",
    )
    assert len(list(cache.iterdir())) == 4
    assert _bytes(a)["model.safetensors"] != _bytes(b)["model.safetensors"]
    assert (a / "config.json").read_text() != (c / "config.json").read_text()
    shape = json.loads((d / "config.json").read_text())
    assert (shape["intermediate_size"], shape["num_key_value_heads"]) == (96, 1)
    assert json.loads((a / "config.json").read_text())["intermediate_size"] == 128


def test_a_damaged_entry_is_rebuilt_not_copied(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good, _ = prepare_model(_cfg(tmp_path / "a"), tmp_path / "a")
    (entry,) = cache.iterdir()
    weights = entry / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated (a full disk, an edit)
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.modeling.cache"):
        again, _ = prepare_model(_cfg(tmp_path / "b"), tmp_path / "b")
    assert _bytes(again) == _bytes(good)
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"{entry} does not match its manifest ({weights} has " in message
    assert "(truncated?)" in message
    assert (entry / MANIFEST).is_file() and weights.stat().st_size == len(_bytes(good)[FILES[1]])
    # a folder without a manifest (left by hand) is replaced too
    (entry / MANIFEST).unlink()
    prepare_model(_cfg(tmp_path / "c"), tmp_path / "c")
    assert (entry / MANIFEST).is_file()


def test_a_cache_that_cannot_be_written_only_costs_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.modeling.cache"):
        model, _ = prepare_model(_cfg(tmp_path / "a"), tmp_path / "a")
    assert (model / "config.json").is_file()
    assert any("could not store the built model" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["model"]


def test_cache_off_writes_nothing_there(tmp_path: Path, cache: Path) -> None:
    prepare_model(_cfg(tmp_path / "a", "model.tiny.cache=false"), tmp_path / "a")
    assert not cache.exists()


def test_a_cached_model_starts_a_run_without_transformers_model_code(
    tmp_path: Path, cache: Path
) -> None:
    # The point of the cache: the driver's start-up skips importing the model code
    # (~3 s on 2 cores) and building. A fresh interpreter, as a run's driver.
    prepare_model(_cfg(tmp_path / "a"), tmp_path / "a")
    probe = (
        "import sys; from nexrl.driver.recipe import load_recipe_checked; "
        "from nexrl.driver.modeling.prepare import prepare_model; "
        f"cfg = load_recipe_checked({RECIPE!r}, ['output_dir={tmp_path / 'b'}']).cfg; "
        f"prepare_model(cfg, __import__('pathlib').Path({str(tmp_path / 'b')!r})); "
        "print(sorted(m for m in sys.modules if m.startswith('transformers.models.qwen2')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "b" / "model" / "model.safetensors").is_file()
