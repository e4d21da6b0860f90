"""Staged training: ``model.path`` naming another run's folder, its snapshot folder or
one snapshot resolves to a complete snapshot checked against its checksums, and the
new run records its parent (``parent.json``, the summary). Each case is a real run
folder: a recorded ``config.yaml`` and snapshots published by ``SnapshotPublisher``
from a tiny model's weights."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.record import recorded_yaml
from nexrl.core.util.run_parent import read_parent
from nexrl.driver.cli.train import main
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.metrics.summary import write_summary
from nexrl.driver.modeling.folder import ModelSetupError
from nexrl.driver.modeling.parent import ModelSource, resolve_model_source
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"
STAGE1 = "recipes/top_two/top_two_stage1.yaml"
STAGE2 = "recipes/top_two/top_two_stage2.yaml"


def make_run(model_dir: Path, out: Path, recipe: str, versions: tuple[int, ...]) -> Path:
    """A run folder as a run of ``recipe`` leaves it: ``config.yaml`` and ``snapshots/vN``
    (``latest`` on the last), the weights of ``model_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    from nexrl.core.weights.snapshot import SnapshotPublisher

    cfg = load_recipe_checked(recipe, [f"output_dir={out}"]).cfg
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(recorded_yaml(cfg))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    pub = SnapshotPublisher(out / "snapshots", keep=5, tokenizer_dir=model_dir)
    for v in versions:
        pub.publish(model.state_dict(), model.config, version=v)
    pub.wait()
    return out


@pytest.fixture(scope="module")
def vocab_model(tiny_model: Any) -> Path:
    """A tiny model with the top_two recipes' vocabulary (their stage 2 loads it)."""
    cfg = load_recipe_checked(STAGE1).cfg
    return Path(tiny_model(vocab=list(cfg.model.tiny.vocab), byte_fallback=False))


@pytest.fixture(scope="module")
def stage1(vocab_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished stage-1 run: snapshots v10, v20, v30 (latest)."""
    return make_run(vocab_model, tmp_path_factory.mktemp("w") / "stage1", STAGE1, (10, 20, 30))


@pytest.fixture
def damaged(stage1: Path, tmp_path: Path) -> Path:
    """A copy of the stage-1 run to damage (the ``latest`` link copied as a link)."""
    return Path(shutil.copytree(stage1, tmp_path / "copy", symlinks=True))


def flip_a_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))  # same size: only the checksum tells


@pytest.mark.parametrize(
    ("given", "version"),
    [("", 30), ("snapshots", 30), ("snapshots/latest", 30), ("snapshots/v20", 20)],
)
def test_a_run_folder_or_snapshot_resolves_to_its_snapshot_and_names_its_parent(
    stage1: Path, given: str, version: int
) -> None:
    value = str(stage1 / given) if given else str(stage1)
    source = resolve_model_source(value)
    assert source.path.resolve() == (stage1 / "snapshots" / f"v{version}").resolve()
    parent = source.parent
    assert parent is not None
    manifest = (stage1 / "snapshots" / f"v{version}" / "checksums.json").read_bytes()
    assert parent == {
        "model_path": value,
        "snapshot": str((stage1 / "snapshots" / f"v{version}").resolve()),
        "version": version,
        "run": str(stage1.resolve()),
        "experiment_name": "top_two_stage1",
        "fingerprint": "sha256:" + hashlib.sha256(manifest).hexdigest(),
    }


def test_a_model_folder_has_no_parent(vocab_model: Path) -> None:
    assert resolve_model_source(str(vocab_model)) == ModelSource(vocab_model)


def test_without_latest_the_newest_complete_snapshot_is_taken(damaged: Path) -> None:
    (damaged / "snapshots" / "latest").unlink()
    shutil.copytree(damaged / "snapshots" / "v30", damaged / "snapshots" / "v40")
    (damaged / "snapshots" / "v40" / "version").unlink()  # v40 was never completed
    source = resolve_model_source(str(damaged))
    assert source.path.name == "v30" and source.parent and source.parent["version"] == 30


def test_a_run_with_no_snapshot_is_refused_in_one_line(damaged: Path) -> None:
    shutil.rmtree(damaged / "snapshots")
    (damaged / "snapshots").mkdir()
    with pytest.raises(ModelSetupError) as err:
        resolve_model_source(str(damaged))
    assert str(err.value) == (
        f"model.path: {damaged} has no complete snapshot under {damaged / 'snapshots'} (the "
        "run has not published one yet: let it train at least weight.sync_every steps, or "
        "resume it to its end); point model.path at a complete snapshot "
        "(runs/<name>/snapshots/vN) or a Hugging Face model folder"
    )


def test_a_damaged_newest_snapshot_is_refused_naming_the_others(damaged: Path) -> None:
    flip_a_byte(damaged / "snapshots" / "v30" / "model.safetensors")
    with pytest.raises(ModelSetupError) as err:
        resolve_model_source(str(damaged))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"model.path: {damaged}: its newest snapshot v30 is damaged (")
    assert "model.safetensors" in line and "(other snapshots there: v10, v20)" in line
    # a damaged vN given directly, and an incomplete one
    with pytest.raises(ModelSetupError, match=r"^model.path: snapshot .*/v30 is damaged"):
        resolve_model_source(str(damaged / "snapshots" / "v30"))
    (damaged / "snapshots" / "v20" / "version").unlink()
    with pytest.raises(ModelSetupError, match=r"^model.path: .*/v20 is an incomplete snapshot"):
        resolve_model_source(str(damaged / "snapshots" / "v20"))


def test_the_recipe_check_refuses_a_damaged_parent_before_anything_starts(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_recipe_checked(STAGE2, [f"model.path={damaged}"]).cfg.model.path == str(damaged)
    flip_a_byte(damaged / "snapshots" / "v30" / "model.safetensors")
    with pytest.raises(RecipeError, match="its newest snapshot v30 is damaged"):
        load_recipe_checked(STAGE2, [f"model.path={damaged}"])
    assert main([STAGE2, f"model.path={damaged}", "--check"]) == 2
    _, err = capsys.readouterr()
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert f"model.path: {damaged}: its newest snapshot v30 is damaged" in line


def test_stage_2_starts_from_stage_1_by_recipe_alone(
    stage1: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped stage-2 recipe, in a checkout where stage 1 ran (runs/top_two_stage1),
    with no override: its model is stage 1's latest snapshot, recorded as its parent."""
    repo = Path.cwd()
    (tmp_path / "runs").mkdir()
    os.symlink(stage1, tmp_path / "runs" / "top_two_stage1")
    os.symlink(repo / "recipes", tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    recipe = load_recipe_checked(STAGE2)
    cfg = recipe.cfg
    assert cfg.model.path == "runs/top_two_stage1"  # as shipped
    out = tmp_path / "runs" / "top_two_stage2"
    RunDir(out).prepare(recipe, str(out / "pool.zarr"))
    model_dir, tok_dir = prepare_model(cfg, out, recipe.roots)
    assert model_dir == tok_dir == (stage1 / "snapshots" / "v30").resolve()
    parent = read_parent(out)
    assert parent is not None
    assert (parent["model_path"], parent["version"]) == ("runs/top_two_stage1", 30)
    assert parent["experiment_name"] == "top_two_stage1"
    assert parent["run"] == str(stage1.resolve())
    # the summary names it
    text = write_summary(out, [])
    assert json.loads((out / "summary.json").read_text())["parent"] == parent
    assert f"started from: {stage1.resolve()} (experiment top_two_stage1) snapshot v30" in text


def test_a_resumed_run_keeps_the_parent_it_started_from(
    stage1: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "stage2"
    pinned = f"model.path={stage1}/snapshots/v20"
    recipe = load_recipe_checked(STAGE2, [pinned, f"output_dir={out}"])
    prepare_model(recipe.cfg, out, recipe.roots)
    first = read_parent(out)
    assert first is not None and first["version"] == 20
    step = out / "checkpoints" / "step_5"  # it trained and saved a checkpoint
    step.mkdir(parents=True)
    (step / "meta.json").write_text("{}")
    again = load_recipe_checked(STAGE2, [f"model.path={stage1}", f"output_dir={out}"])
    with caplog.at_level("INFO", logger="nexrl.driver.modeling.parent"):
        prepare_model(again.cfg, out, again.roots)
    assert read_parent(out) == first  # what its weights grew from, not today's latest
    assert "resumes from its own checkpoint; it started from" in caplog.text
    assert "snapshot v20" in caplog.text


def test_a_parent_with_a_parent_is_recorded_as_a_chain(stage1: Path, tmp_path: Path) -> None:
    # stage 2 ran from stage 1 (its parent.json), then stage 3 starts from stage 2
    two = tmp_path / "two"
    recipe = load_recipe_checked(STAGE2, [f"model.path={stage1}", f"output_dir={two}"])
    prepare_model(recipe.cfg, two, recipe.roots)
    (two / "config.yaml").write_text(recorded_yaml(recipe.cfg))
    shutil.copytree(stage1 / "snapshots", two / "snapshots", symlinks=True)
    source = resolve_model_source(str(two))
    assert source.parent is not None
    assert source.parent["experiment_name"] == "top_two_stage2"
    assert source.parent["parent"] == read_parent(two)
    assert source.parent["parent"]["run"] == str(stage1.resolve())


def test_a_lora_runs_adapter_snapshot_is_refused_as_a_next_stage(tmp_path: Path) -> None:
    import torch

    from nexrl.core.weights.snapshot import SnapshotPublisher

    run = tmp_path / "lora"
    run.mkdir()
    (run / "config.yaml").write_text("experiment_name: lora\n")
    SnapshotPublisher(run / "snapshots").publish_adapter(
        {"lora_A.weight": torch.zeros(2, 2)}, {"peft_type": "LORA"}, version=3
    )
    for given in (run, run / "snapshots" / "v3"):
        with pytest.raises(ModelSetupError) as err:
            resolve_model_source(str(given))
        assert f"model.path: {given}: snapshot v3 is a LoRA adapter" in str(err.value)
