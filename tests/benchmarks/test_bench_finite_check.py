"""The embedded server's finiteness check of a reloaded snapshot (pytest-benchmark):
``all_finite`` (a float32-accumulated sum per tensor, the element-wise check only
where a sum overflows) vs ``isfinite(t).all()`` per tensor (the check before it),
on the same tensors in the same run: bf16 weights shaped like one decoder layer of
Qwen2.5-0.5B (hidden 896, MLP 4864), 8 layers' worth (~120M values)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from backends.inference.embedded.weights import all_finite

_results: dict[str, float] = {}


@pytest.fixture(scope="module")
def layers() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(896, 896), (128, 896), (128, 896), (896, 896)] + [(4864, 896)] * 2 + [(896, 4864)]
    return [
        (torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16) for _ in range(8) for s in shapes
    ]


def _elementwise(tensors: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


@pytest.mark.benchmark(group="finite-check")
def test_isfinite_per_element(benchmark: Any, layers: list[torch.Tensor]) -> None:
    assert benchmark.pedantic(_elementwise, args=(layers,), rounds=5, warmup_rounds=1)
    _results["elementwise_s"] = benchmark.stats.stats.mean
    benchmark.extra_info.update(
        values=sum(t.numel() for t in layers), load_avg_1m=os.getloadavg()[0]
    )


@pytest.mark.benchmark(group="finite-check")
def test_all_finite_by_sums(benchmark: Any, layers: list[torch.Tensor]) -> None:
    assert benchmark.pedantic(all_finite, args=(layers,), rounds=5, warmup_rounds=1)
    info: dict[str, float] = {"load_avg_1m": os.getloadavg()[0]}
    if "elementwise_s" in _results:
        info["speedup"] = _results["elementwise_s"] / benchmark.stats.stats.mean
    benchmark.extra_info.update(info)
    print(f"\nall_finite: {benchmark.stats.stats.mean:.3f} s, {info}")
