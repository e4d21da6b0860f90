"""Snapshot validation: only a complete snapshot that fits the served model loads."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from backends.inference.embedded.weights import (
    SnapshotError,
    _load_into_copy,
    all_finite,
    load_snapshot,
    resolve_dtype,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def snapshots(tiny_model: Callable[..., Path]) -> dict[str, Path]:
    return {
        "a": tiny_model(seed=1),
        "b": tiny_model(seed=2),
        "narrow": tiny_model(seed=3, hidden_size=32),
    }


@pytest.fixture(scope="module")
def served(snapshots: dict[str, Path]) -> Any:
    return load_snapshot(snapshots["a"], device=CPU, dtype=torch.float32)


def _edit_weights(fn: Callable[[dict[str, torch.Tensor]], object]) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        tensors = load_file(d / "model.safetensors")
        fn(tensors)
        save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})

    return edit


def _truncate(d: Path) -> None:
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])


def _sharded_missing_shard(d: Path) -> None:
    (d / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


UP = "model.layers.1.mlp.up_proj.weight"
BROKEN: dict[str, tuple[Callable[[Path], object], str]] = {
    "no config": (lambda d: (d / "config.json").unlink(), "no config.json"),
    "bad config": (lambda d: (d / "config.json").write_text("{"), "config.json is unreadable"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no model.safetensors"),
    "truncated": (_truncate, "failed to load"),
    "missing shard": (_sharded_missing_shard, "missing weight shards"),
    "missing tensor": (_edit_weights(lambda t: t.pop(UP)), "missing_keys"),
    "wrong shape": (_edit_weights(lambda t: t.update({UP: torch.zeros(3, 3)})), "failed to load"),
    "extra tensor": (_edit_weights(lambda t: t.update(junk=torch.zeros(2))), "unexpected_keys"),
    "nan": (
        _edit_weights(lambda t: t["model.norm.weight"].fill_(float("nan"))),
        "non-finite logits",
    ),
}


def test_good_snapshot_loads_against_the_served_model(
    snapshots: dict[str, Path], served: Any
) -> None:
    model = load_snapshot(snapshots["b"], device=CPU, dtype=torch.float32, reference=served)
    a, b = served.state_dict()["lm_head.weight"], model.state_dict()["lm_head.weight"]
    assert a.shape == b.shape and not torch.equal(a, b)


def test_a_same_architecture_reload_copies_the_served_model(
    snapshots: dict[str, Path], served: Any
) -> None:
    """The reload fast path: the served model's copy with the snapshot's tensors holds
    exactly what a full ``from_pretrained`` load holds, and the served model is kept."""
    before = {k: v.clone() for k, v in served.state_dict().items()}
    fast = _load_into_copy(snapshots["b"], served)
    full = load_snapshot(snapshots["b"], device=CPU, dtype=torch.float32)
    assert fast is not None and fast is not served and not fast.training
    a, b = fast.state_dict(), full.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.tensor([[11, 12, 13]])
    assert torch.equal(fast(input_ids=ids).logits, full(input_ids=ids).logits)
    assert all(torch.equal(v, before[k]) for k, v in served.state_dict().items())
    assert _load_into_copy(snapshots["narrow"], served) is None  # another architecture


def test_a_reload_chain_checks_each_config_it_has_not_seen(
    snapshots: dict[str, Path], served: Any, tmp_path: Path
) -> None:
    """A reload skips parsing a config.json whose bytes the served model was accepted
    with (every reload of a run writes the same one); other bytes are parsed and
    compared as before."""
    first = _load_into_copy(snapshots["b"], served)
    assert first is not None
    again = _load_into_copy(snapshots["a"], first)  # the same config bytes: accepted
    assert again is not None
    assert torch.equal(again.state_dict()[UP], served.state_dict()[UP])
    assert _load_into_copy(snapshots["narrow"], again) is None  # other bytes, other model
    spaced = tmp_path / "spaced"  # other bytes, same model: parsed, then accepted
    shutil.copytree(snapshots["b"], spaced)
    config = json.loads((spaced / "config.json").read_text())
    (spaced / "config.json").write_text(json.dumps(config, indent=4))
    assert _load_into_copy(spaced, again) is not None
    bad = tmp_path / "bad"
    shutil.copytree(snapshots["b"], bad)
    (bad / "config.json").write_text(json.dumps({**config, "hidden_size": 32}))
    assert _load_into_copy(bad, again) is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_one_non_finite_value_anywhere_stops_the_fast_path(
    value: float, snapshots: dict[str, Path], served: Any, tmp_path: Path
) -> None:
    """One NaN or infinity among a matrix's values (the sum-based check must see it)."""
    snap = tmp_path / "snap"
    shutil.copytree(snapshots["b"], snap)
    _edit_weights(lambda t: t[UP].__setitem__((3, 5), value))(snap)
    assert _load_into_copy(snap, served) is None


def test_finite_values_whose_sum_overflows_still_load(
    snapshots: dict[str, Path], served: Any, tmp_path: Path
) -> None:
    """3e38 + 3e38 overflows float32, but every value is finite: accepted, as
    ``isfinite`` would, for every floating dtype."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        big = 6e4 if dtype == torch.float16 else 3e38
        t = torch.full((4, 4), big, dtype=dtype)
        assert bool(torch.isfinite(t).all()) and all_finite([t]), dtype
        t[1, 2] = float("nan")
        assert not all_finite([torch.zeros(3), t]), dtype
    assert all_finite([torch.empty(0), torch.arange(5)])  # empty and integer: nothing to check
    snap = tmp_path / "snap"
    shutil.copytree(snapshots["b"], snap)
    _edit_weights(lambda t: t[UP][0, :2].fill_(3e38))(snap)
    model = _load_into_copy(snap, served)
    assert model is not None
    assert model.state_dict()[UP][0, :2].tolist() == [pytest.approx(3e38, rel=1e-6)] * 2


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_snapshot_is_rejected(
    case: str, snapshots: dict[str, Path], served: Any, tmp_path: Path
) -> None:
    breaker, message = BROKEN[case]
    snap = tmp_path / "snap"
    shutil.copytree(snapshots["b"], snap)
    breaker(snap)
    before = served.state_dict()["lm_head.weight"].clone()
    assert _load_into_copy(snap, served) is None  # the fast path declines: the full way names it
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(snap, device=CPU, dtype=torch.float32, reference=served)
    assert torch.equal(served.state_dict()["lm_head.weight"], before)


def test_other_architecture_is_rejected(snapshots: dict[str, Path], served: Any) -> None:
    with pytest.raises(SnapshotError, match="hidden_size=32"):
        load_snapshot(snapshots["narrow"], device=CPU, dtype=torch.float32, reference=served)
    with pytest.raises(SnapshotError, match="not a directory"):
        load_snapshot("/nonexistent/snap", device=CPU, dtype=torch.float32, reference=served)


def test_dtype_names() -> None:
    assert resolve_dtype("auto", CPU) is torch.float32
    assert resolve_dtype("bfloat16", CPU) is torch.bfloat16
    with pytest.raises(ValueError):
        resolve_dtype("float7", CPU)
