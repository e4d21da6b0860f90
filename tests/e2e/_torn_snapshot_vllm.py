"""A fault for ``tests/e2e/test_vllm_faults.py``: the real vLLM reload adapter, except
that snapshot ``v2`` is torn just before vLLM is told to load it (its
``model.safetensors`` cut to half its size, as a copy interrupted on shared storage
leaves it). The recipe names it ``service.inference_service.backend:
tests/e2e/_torn_snapshot_vllm.py:TornSnapshotVLLM``; vLLM itself then refuses the
reload (its own error), which is the fault under test."""

from __future__ import annotations

import os
from pathlib import Path

from backends.inference.adapters import VLLMReloadAdapter

TORN_VERSION = 2


class TornSnapshotVLLM(VLLMReloadAdapter):
    backend = "vllm"

    def _reload_one(self, base_url: str, model_path: str, version: int) -> str:
        if version == TORN_VERSION:
            weights = Path(model_path) / "model.safetensors"
            if weights.exists():
                os.truncate(weights, weights.stat().st_size // 2)
        return super()._reload_one(base_url, model_path, version)
