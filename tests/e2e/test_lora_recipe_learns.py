"""The LoRA variant of the default recipe (recipes/max_digit/max_digit_lora.yaml)
learns: adapters on every linear layer, with the embedding and head trained
beside them, move the greedy validation reward of the tiny random-init model
well past one fixed answer (7/49 = 0.14), and every snapshot holds the adapter
only (no full model.safetensors).

The run takes ~1-2 min on 2 busy cores. Requests are seeded, so it is the same
run each time on the same platform and sampler. Measured 2026-11-25 with the
recipe's lr 5e-3 over six seeds: greedy validation at step 75 0.69 (seed 42, the
recipe's), 0.59, 1.0, 0.53, 0.86, 0.96 (seeds 0-4); the earlier lr 1e-2 ended at
0.29, 0.29, 0.14 on seeds 42, 1, 2. Curves and the settings that did not learn:
docs/trainer.md, "LoRA".
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tests.e2e._recipe import read_rows, train_recipe, train_rows

LORA_RECIPE = "recipes/max_digit/max_digit_lora.yaml"
STEPS = 75
# Measured 0.69 at step 75 (0.02 at step 0), 0.53 the lowest of six seeds; one fixed
# answer is 7/49 = 0.14 and the best setting on the tiny recipe's init_std 0.02
# reached 0.29.
VAL_MIN = 0.4


def test_lora_recipe_reward_goes_up_and_snapshots_hold_adapters_only(tmp_path: Path) -> None:
    out = tmp_path / "run"
    train_recipe(LORA_RECIPE, out)
    train = train_rows(out)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    first = statistics.mean(r["reward/mean"] for r in train[:5])
    assert first <= 0.1, first
    val = [r["val/reward/mean"] for r in read_rows(out) if "val/reward/mean" in r]
    assert val[0] <= 0.15, val
    assert val[-1] >= VAL_MIN, val
    assert all(r["version/rollout_min"] == r["step"] - 1 for r in train)

    snapshots = sorted(p for p in (out / "snapshots").iterdir() if p.name.startswith("v"))
    assert snapshots, "no snapshot was published"
    for snap in snapshots:
        names = {p.name for p in snap.iterdir()}
        assert "adapter_model.safetensors" in names, (snap, names)
        assert "adapter_config.json" in names, (snap, names)
        assert not any(n.startswith("model") and n.endswith(".safetensors") for n in names), (
            snap,
            names,
        )
