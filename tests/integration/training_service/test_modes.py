"""Self-hosted vs training-service mode on a real Dask LocalCluster (worker processes):
the same batch file gives the same step, through the interface the controller uses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from nexrl.trainer import TrainerGroup, save_batch
from nexrl.trainer.rank_calls import RankCall
from nexrl.trainer.service import TrainingClient
from nexrl.trainer.service.actor import start_service_on_cluster
from nexrl.trainer.service.group import ServiceTrainerGroup
from nexrl.trainer.service.wire import Datum, batch_from_data
from tests.integration.training_service._data import rows
from tests.unit.trainer._helpers import spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")
pytest.importorskip("distributed")

# The metrics that say what the update was (timings and throughput differ run to run).
CHECKED = (
    "actor/loss",
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/kl_loss",
    "actor/lr",
    "critic/advantages/mean",
    "critic/rewards/mean",
    "batch/size",
    "batch/num_groups",
)


def _spec(model: Path, root: Path) -> Any:
    return spec(
        model,
        trainer={"ppo_epochs": 2, "lr": 5e-3, "micro_batch_size": 3, "grad_clip": 1.0},
        algorithm={"kl_loss_coef": 0.05},  # a reference model and a KL term, too
        snapshot_dir=str(root / "snaps"),
        checkpoint_dir=str(root / "ck"),
        auto_checkpoint=False,
    )


def _weights(folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_both_modes_give_the_same_step_on_the_same_batch(
    local_cluster: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    vocab = int(json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"])
    path = tmp_path / "step_1.pt"
    save_batch(batch_from_data([Datum(**r) for r in rows(vocab, groups=3, seed=4)]), path)

    group = TrainerGroup.create(local_cluster, _spec(tiny_model_dir, tmp_path / "a"), timeout_s=300)
    try:
        hosted = group.step(str(path))
    finally:
        group.close()

    handle = start_service_on_cluster(local_cluster, _spec(tiny_model_dir, tmp_path / "b"))
    assert handle.url.startswith("http://127.0.0.1:")
    service = ServiceTrainerGroup(TrainingClient(handle.url), timeout_s=300, handle=handle)
    try:
        assert service.setup_info()[0]["global_step"] == 0
        served = service.start(RankCall.STEP, str(path)).result()[0]  # as the controller calls it
        checkpoint = service.save_checkpoint({"controller": {"step": 1}})
        extra = service.call(RankCall.EXTRA_STATE)[0]
    finally:
        service.close()

    assert (served.global_step, served.policy_version) == (hosted.global_step, 1)
    assert served.published_version == hosted.published_version == 1
    assert set(served.metrics) == set(hosted.metrics)
    for key in CHECKED:
        assert served.metrics[key] == pytest.approx(hosted.metrics[key], rel=1e-6, abs=1e-9), key
    assert hosted.metrics["actor/grad_norm"] > 0.1 and hosted.metrics["actor/kl_loss"] >= 0
    assert hosted.metrics["batch/size"] == 12.0 and hosted.metrics["batch/num_groups"] == 3.0
    assert served.snapshot_path and hosted.snapshot_path
    a, b = _weights(hosted.snapshot_path), _weights(served.snapshot_path)
    assert a.keys() == b.keys() and all((a[k] - b[k]).abs().max() < 1e-6 for k in a)
    assert checkpoint is not None and Path(checkpoint).name == "step_1"
    assert extra == {"controller": {"step": 1}}
