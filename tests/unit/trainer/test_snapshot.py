"""Snapshot publishing: loadable HF folders, versions, latest pointer, retention."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from backends.inference.embedded.weights import load_snapshot
from nexrl.core.weights.snapshot import (
    SnapshotError,
    SnapshotPublisher,
    latest_snapshot,
    list_snapshots,
    prepare_state_dict,
    read_version,
    verify_snapshot,
    write_safetensors,
)


def _model(tiny_model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _perturbed(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()
    }


def test_published_snapshot_loads_with_from_pretrained_and_the_server_check(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = _model(tiny_model_dir)
    pub = SnapshotPublisher(tmp_path / "snaps", keep=2, tokenizer_dir=tiny_model_dir)
    state = _perturbed(model, 1)
    snap = pub.publish(state, model.config, version=1)
    assert snap.path == tmp_path / "snaps" / "v1" and read_version(snap.path) == 1
    assert snap.num_bytes > sum(t.numel() * 4 for t in state.values())
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "snaps" / "latest")
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert AutoTokenizer.from_pretrained(snap.path)("largest digit").input_ids
    served = load_snapshot(
        snap.path, device=torch.device("cpu"), dtype=torch.float32, reference=model
    )
    assert served is not None


def test_latest_moves_and_old_versions_are_pruned(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = _model(tiny_model_dir)
    pub = SnapshotPublisher(tmp_path, keep=2)
    for v in (1, 2, 3, 4):
        pub.publish(model.state_dict(), model.config, version=v)
        assert latest_snapshot(tmp_path) == (v, tmp_path / f"v{v}")
    assert [v for v, _ in list_snapshots(tmp_path)] == [3, 4]
    assert os.readlink(tmp_path / "latest") == "v4"
    pub.wait()  # pruned folders are deleted in the background
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_republish_and_discard_newer_after_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = _model(tiny_model_dir)
    pub = SnapshotPublisher(tmp_path, keep=5)
    for v in (1, 2, 3):
        pub.publish(_perturbed(model, v), model.config, version=v)
    assert pub.discard_newer_than(1) == [2, 3]
    assert latest_snapshot(tmp_path) == (1, tmp_path / "v1")
    new = _perturbed(model, 99)
    pub.publish(new, model.config, version=1)  # replaces the v1 latest names
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "latest")
    assert torch.equal(loaded.state_dict()["lm_head.weight"], new["lm_head.weight"])
    assert pub.discard_newer_than(0) == [1] and not (tmp_path / "latest").exists()


def test_incomplete_folders_are_ignored_and_cleaned(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = _model(tiny_model_dir)
    SnapshotPublisher(tmp_path).publish(model.state_dict(), model.config, version=1)
    (tmp_path / "v2").mkdir()  # no version file: not a snapshot
    (tmp_path / ".tmp-v3-deadbeef").mkdir()
    assert [v for v, _ in list_snapshots(tmp_path)] == [1]
    SnapshotPublisher(tmp_path)
    assert not (tmp_path / ".tmp-v3-deadbeef").exists()


def test_a_latest_link_left_by_a_killed_publish_is_cleaned(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = _model(tiny_model_dir)
    SnapshotPublisher(tmp_path).publish(model.state_dict(), model.config, version=1)
    # killed between making the new link and renaming it over 'latest'
    stray = tmp_path / f".latest.tmp-{'ab' * 16}"
    os.symlink("v2", stray)
    assert latest_snapshot(tmp_path) == (1, tmp_path / "v1")
    SnapshotPublisher(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["latest", "v1"]


def test_sharded_snapshot_loads(tiny_model_dir: Path, tmp_path: Path) -> None:
    model = _model(tiny_model_dir)
    pub = SnapshotPublisher(tmp_path, max_shard_bytes=40_000)
    snap = pub.publish(model.state_dict(), model.config, version=7)
    assert (snap.path / "model.safetensors.index.json").exists()
    assert len(list(snap.path.glob("model-*-of-*.safetensors"))) > 1
    loaded = AutoModelForCausalLM.from_pretrained(snap.path)
    x = torch.tensor([[5, 6, 7]])
    assert torch.equal(loaded(x).logits, model(x).logits)
    # checksums.json: the shards were hashed while written; every entry is what a
    # fresh read of the file gives, and the snapshot verifies
    manifest = json.loads((snap.path / "checksums.json").read_text())
    files = sorted(p.name for p in snap.path.iterdir() if p.name not in ("checksums.json",))
    assert sorted(manifest) == [f for f in files if f != "version"]
    for name, entry in manifest.items():
        data = (snap.path / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    assert verify_snapshot(snap.path) is None
    shard = next(snap.path.glob("model-00002-of-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x01
    shard.write_bytes(bytes(data))
    assert verify_snapshot(snap.path) == (
        f"{shard} does not match its sha256 checksum (its bytes changed)"
    )


def test_a_shard_that_fails_fails_the_publish_and_keeps_the_last_good_one(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Shards are written by several threads: one failing (here a tensor safetensors
    cannot store, in a middle shard) fails the publish, names the tensor, and leaves
    ``latest`` on the previous snapshot with no partial folder."""
    model = _model(tiny_model_dir)
    pub = SnapshotPublisher(tmp_path, max_shard_bytes=40_000)
    pub.publish(model.state_dict(), model.config, version=1)
    state = dict(model.state_dict())
    names = list(state)
    bad = names[len(names) // 2]
    state[bad] = torch.zeros(3, dtype=torch.complex64)
    with pytest.raises(SnapshotError, match=re.escape(repr(bad))):
        pub.publish(state, model.config, version=2)
    assert latest_snapshot(tmp_path) == (1, tmp_path / "v1")
    assert sorted(os.listdir(tmp_path)) == ["latest", "v1"]
    assert verify_snapshot(tmp_path / "v1") is None


def test_tied_and_flat_buffer_tensors_round_trip(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    emb = torch.randn(5, 3)
    flat = torch.randn(20, dtype=torch.float32)
    half = torch.randn(4, dtype=torch.bfloat16)
    state = {"embed.weight": emb, "lm_head.weight": emb, "a": flat[:10], "b": flat[10:], "h": half}
    tied = prepare_state_dict(state, tie_word_embeddings=True)
    assert list(tied) == ["embed.weight", "a", "b", "h"]
    assert tied["b"].data_ptr() == flat[10:].data_ptr()  # written from the buffer, no copy
    write_safetensors(prepare_state_dict(state), tmp_path)
    loaded = load_file(tmp_path / "model.safetensors")
    assert loaded.keys() == state.keys()
    for k, v in state.items():
        assert torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype, k


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        SnapshotPublisher(tmp_path, keep=0)
