"""Seconds per weight sync into a REAL vLLM (the CPU build): the trainer's weights
from memory (the weight channel in ``/dev/shm`` and vLLM's own weight-update API
with nexrl's ``nexrl_shm`` engine; generation paused, ``mode=keep``) against the
file path it replaces (the snapshot published with fsync, then vLLM's
``reload_weights`` of it), without a pause (as a sync run reloads) and with one
(``mode=wait``, as the memory path pauses), in the same run, alternating, on the
default vLLM model (~137k parameters) and one ~50x larger (~7.5M).

Long (two vLLM starts, ~2 min on 2 cores): ``NEXRL_BENCH_LONG=1``; the figures are
in docs/benchmarks.md ("Weight sync into vLLM"). Run with ``-s`` to see them."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.weights.handoff.channel import WeightChannel
from nexrl.core.weights.snapshot import SnapshotPublisher
from tests.e2e._vllm import serve_vllm

pytestmark = pytest.mark.skipif(
    os.environ.get("NEXRL_BENCH_LONG") != "1",
    reason="a long benchmark (two vLLM starts): set NEXRL_BENCH_LONG=1 to run it",
)

SYNCS = 8
# head_dim 64 (vLLM's CPU attention): the default vLLM model, and ~50x its parameters
MODELS = {
    "default (137k)": {"num_heads": 1, "num_kv_heads": 1},
    "~50x (7.5M)": {
        "hidden_size": 256,
        "num_layers": 6,
        "num_heads": 4,
        "num_kv_heads": 4,
        "intermediate_size": 1280,
    },
}


def _syncs(url: str, model_dir: Path, root: Path) -> dict[str, float]:
    from transformers import AutoConfig, AutoModelForCausalLM

    from backends.inference.adapters import VLLMReloadAdapter

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    config = AutoConfig.from_pretrained(str(model_dir))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    adapter = VLLMReloadAdapter([url], timeout_s=300.0)
    paused = VLLMReloadAdapter([url], timeout_s=300.0, pause=True)
    channel = WeightChannel("shm", torch.device("cpu"))
    publisher = SnapshotPublisher(root, keep=2, tokenizer_dir=model_dir)
    times: dict[str, list[float]] = {"memory": [], "files": [], "files, paused": []}
    try:
        adapter.channel_identity()
        for v in range(1, 3 * SYNCS + 1):
            for t in state.values():
                t.add_(1e-4)  # new weights each time
            start = time.perf_counter()
            if v % 3 == 1:
                adapter.reload_from_channel(channel.write(state, v), v)
                times["memory"].append(time.perf_counter() - start)
            else:
                snap = publisher.publish(state, config, v)
                (adapter if v % 3 == 2 else paused).reload(str(snap.path), v)
                times["files" if v % 3 == 2 else "files, paused"].append(
                    time.perf_counter() - start
                )
        served = adapter.served_version(url)
    finally:
        channel.close()
        adapter.close()
        paused.close()
    assert served == 3 * SYNCS  # every sync, each way, labelled in vLLM
    return {
        "params": sum(t.numel() for t in state.values()),
        **{k: statistics.median(v) for k, v in times.items()},
    }


def test_bench_weight_sync_into_vllm_memory_vs_files(
    tiny_model: Any, tmp_path: Path, capsys: Any
) -> None:
    rows = []
    for name, kwargs in MODELS.items():
        model_dir = Path(tiny_model(seed=1, **kwargs))
        with serve_vllm(model_dir, "--max-model-len", "64") as url:
            row = _syncs(url, model_dir, tmp_path / name.split()[0] / "snapshots")
        rows.append((name, row))
    with capsys.disabled():
        print("\nweight sync into vLLM (median of", SYNCS, "each, alternating):")
        for name, r in rows:
            print(
                f"  {name}: {r['params']:,} params: memory {r['memory'] * 1e3:.1f} ms, "
                f"files {r['files'] * 1e3:.1f} ms ({r['files'] / r['memory']:.2f}x), "
                f"files paused {r['files, paused'] * 1e3:.1f} ms "
                f"({r['files, paused'] / r['memory']:.2f}x)"
            )
