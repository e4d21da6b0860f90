"""LoRA snapshots vs full snapshots (pytest-benchmark, same model, same run).

``lora-publish-reload``: one weight sync as the controller runs it, without the
HTTP hop: the trainer's ``publish_snapshot`` (consolidate, write, fsync, rename,
repoint ``latest``) then the embedded server's reload work on the result
(``load_snapshot`` of the full weights, validated against the served model; or
``load_adapter_snapshot``: the adapter merged into a copy of the served base).
Model: tiny Qwen2, hidden 512, 2 layers (~24 MB fp32); LoRA rank 8 on
q/k/v/o_proj. extra_info: snapshot bytes, and for LoRA ``vs_full`` (full time
over LoRA time) and ``size_vs_full`` (LoRA bytes over full bytes). The LoRA
test's full-snapshot baseline is its own (the ``full_baseline`` fixture, timed
like the benchmark: one warm-up, mean of 5), so each test runs alone as well.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from backends.inference.embedded.weights import load_adapter_snapshot, load_snapshot
from nexrl.core.config.sections.trainer import LoraConfig
from nexrl.driver.modeling.tiny import save_tiny_model
from nexrl.trainer import create_trainer
from tests.unit.trainer._helpers import spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")

MODEL: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_layers": 2,
    "num_heads": 8,
}
LORA = LoraConfig(rank=8, alpha=16.0)
CPU = torch.device("cpu")
ROUNDS = 5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("bench") / "model", seed=0, **MODEL)


@pytest.fixture(scope="module")
def served_base(model_dir: Path) -> Any:
    return load_snapshot(model_dir, device=CPU, dtype=torch.float32)


def _sync(trainer: Any, base: Any, lora: bool) -> int:
    trainer.policy_version += 1
    snap = trainer.publish_snapshot()
    if lora:
        load_adapter_snapshot(snap.path, base=base, device=CPU)
    else:
        load_snapshot(snap.path, device=CPU, dtype=torch.float32, reference=base)
    return int(snap.num_bytes)


def _trainer(model_dir: Path, snaps: Path, lora: bool) -> Any:
    s = spec(model_dir, snapshot_dir=str(snaps), keep_snapshots=2)
    if lora:
        s.trainer = replace(s.trainer, lora=LORA)
    return create_trainer(s)


def _run(benchmark: Any, model_dir: Path, base: Any, tmp_path: Path, lora: bool) -> int:
    """Benchmark one sync; the last snapshot's bytes (recorded in extra_info too)."""
    trainer = _trainer(model_dir, tmp_path / "snaps", lora)
    sizes: list[int] = []
    benchmark.pedantic(
        lambda: sizes.append(_sync(trainer, base, lora)), rounds=ROUNDS, warmup_rounds=1
    )
    benchmark.extra_info["snapshot_bytes"] = sizes[-1]
    trainer.close()
    return sizes[-1]


@pytest.fixture(scope="module")
def full_baseline(
    model_dir: Path, served_base: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, float]:
    """The full snapshot's sync timed as the benchmark times it (one warm-up, mean of
    ``ROUNDS``): ``{"full_s", "full_bytes"}``, the LoRA test's baseline."""
    trainer = _trainer(model_dir, tmp_path_factory.mktemp("full") / "snaps", lora=False)
    try:
        _sync(trainer, served_base, False)
        times, size = [], 0
        for _ in range(ROUNDS):
            start = time.perf_counter()
            size = _sync(trainer, served_base, False)
            times.append(time.perf_counter() - start)
    finally:
        trainer.close()
    return {"full_s": statistics.mean(times), "full_bytes": size}


@pytest.mark.benchmark(group="lora-publish-reload")
def test_publish_and_reload_full_snapshot(
    benchmark: Any, model_dir: Path, served_base: Any, tmp_path: Path
) -> None:
    _run(benchmark, model_dir, served_base, tmp_path, lora=False)


@pytest.mark.benchmark(group="lora-publish-reload")
def test_publish_and_reload_lora_adapter(
    benchmark: Any,
    model_dir: Path,
    served_base: Any,
    tmp_path: Path,
    full_baseline: dict[str, float],
) -> None:
    lora_bytes = _run(benchmark, model_dir, served_base, tmp_path, lora=True)
    benchmark.extra_info.update(
        vs_full=full_baseline["full_s"] / benchmark.stats.stats.mean,
        size_vs_full=lora_bytes / full_baseline["full_bytes"],
    )
    assert lora_bytes < full_baseline["full_bytes"] / 10
