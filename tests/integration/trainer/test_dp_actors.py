"""Data parallelism across Dask actors: world size 2 on a LocalCluster == world size 1.

Two worker processes each offer ``GPU=1``; a ``TrainerGroup`` pins one DeepSpeed
(ZeRO-2, gloo) trainer actor to each. The reference is a world-size-1 trainer in
this process on the same global batches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from nexrl.core.weights.snapshot import latest_snapshot
from nexrl.trainer import TrainerGroup, TrainerGroupError, create_trainer, save_batch
from tests.unit.trainer._helpers import make_batch, spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")
pytest.importorskip("distributed")


def _settings(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "trainer": {
            "zero_stage": 2,
            "micro_batch_size": 3,  # 7 rows per rank -> micro-batches of 3, 3, 1
            "lr": 1e-3,
            "grad_clip": 1.0,
            "total_train_steps": 3,
            "save_every": 2,
            "world_size": 2,
        },
        "algorithm": {"kl_loss_coef": 0.05},
        **extra,
    }


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():  # lr 1e-3: a wrong gradient would move weights by ~1e-3
        assert torch.allclose(v, b[k], atol=2e-5), (k, float((v - b[k]).abs().max()))


def test_world_size_two_equals_world_size_one_and_resumes(
    local_cluster: Any, tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    batches = [make_batch(vocab_size, groups=7, group_size=2, seed=i) for i in range(3)]
    settings = _settings(tmp_path)
    single = create_trainer(spec(tiny_model_dir, **settings))
    expected = [single.train_step(b) for b in batches]

    dist_dirs = {
        "snapshot_dir": str(tmp_path / "snaps"),
        "checkpoint_dir": str(tmp_path / "ck"),
    }
    group = TrainerGroup.create(
        local_cluster, spec(tiny_model_dir, **settings, **dist_dirs), timeout_s=300
    )
    try:
        info = group.setup_info()
        assert [i["rank"] for i in info] == [0, 1] and len({i["pid"] for i in info}) == 2
        got = [
            group.train_step(batches[0]),
            group.train_step(save_batch(batches[1], tmp_path / "b1.pt")),
        ]
        for e, g in zip(expected[:2], got, strict=True):
            assert g["actor/grad_norm"] == pytest.approx(e["actor/grad_norm"], rel=1e-4)
            assert g["actor/loss"] == pytest.approx(e["actor/loss"], rel=1e-4, abs=1e-7)
            assert g["actor/kl_loss"] == pytest.approx(e["actor/kl_loss"], rel=1e-3, abs=1e-7)
            # old log-probs from the update's forward, gathered over both ranks' shards
            corr = [k for k in e if k.startswith("rollout_corr/")]
            assert corr and "timing/old_log_prob" not in g
            for k in corr:
                assert g[k] == pytest.approx(e[k], rel=1e-4, abs=1e-6), k
        weights = group.full_state_dict()
        assert weights is not None
    finally:
        group.close()
    snap = latest_snapshot(tmp_path / "snaps")
    assert snap is not None and snap[0] == 2
    ck = tmp_path / "ck" / "step_2"
    assert (ck / "rng_rank0.pt").exists() and (ck / "rng_rank1.pt").exists()
    assert len(list((ck / "engine").glob("*optim_states.pt"))) == 2  # one ZeRO partition per rank

    resumed = TrainerGroup.create(
        local_cluster,
        spec(tiny_model_dir, **settings, **dist_dirs, resume_mode="auto"),
        timeout_s=300,
    )
    try:
        assert [i["global_step"] for i in resumed.setup_info()] == [2, 2]
        third = resumed.train_step(batches[2])
        assert third["actor/grad_norm"] == pytest.approx(expected[2]["actor/grad_norm"], rel=1e-4)
        final = resumed.full_state_dict()
    finally:
        resumed.close()
    reference = single.full_state_dict()
    assert reference is not None and final is not None
    _assert_same_weights(final, reference)


def test_packed_token_budget_micro_batches_on_two_ranks_equal_padded_rows_on_one(
    local_cluster: Any, tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """``trainer.packing`` and ``trainer.max_tokens_per_micro_batch`` on two DeepSpeed
    ranks (the ranks' micro-batch counts differ: one gets fillers) give the update
    of padded rows on one rank."""
    batches = [
        make_batch(vocab_size, groups=7, group_size=2, seed=10 + i, response_len=(1, 16))
        for i in range(2)
    ]
    settings = _settings(tmp_path)
    single = create_trainer(spec(tiny_model_dir, **settings))
    expected = [single.train_step(b) for b in batches]
    packed = {**settings["trainer"], "packing": True, "max_tokens_per_micro_batch": 20}
    group = TrainerGroup.create(
        local_cluster, spec(tiny_model_dir, **{**settings, "trainer": packed}), timeout_s=300
    )
    try:
        got = [group.train_step(b) for b in batches]
        for e, g in zip(expected, got, strict=True):
            assert g["actor/grad_norm"] == pytest.approx(e["actor/grad_norm"], rel=1e-4)
            assert g["actor/loss"] == pytest.approx(e["actor/loss"], rel=1e-4, abs=1e-7)
            assert g["actor/kl_loss"] == pytest.approx(e["actor/kl_loss"], rel=1e-3, abs=1e-7)
        weights = group.full_state_dict()
    finally:
        group.close()
    reference = single.full_state_dict()
    assert reference is not None and weights is not None
    _assert_same_weights(weights, reference)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_ppo_with_a_value_model_on_two_ranks_equals_one(
    local_cluster: Any, tiny_model_dir: Path, vocab_size: int, tmp_path: Path, packed: bool
) -> None:
    """self_hosted_ppo: the critic's values are gathered over both ranks' shards and its
    update is the token mean over the global batch, as the policy's; ``packed``: the
    two ranks pack (policy and critic) with token-budget micro-batches, the one rank
    trains padded rows."""
    settings = _settings(tmp_path)
    settings["trainer"] = {**settings["trainer"], "type": "self_hosted_ppo", "save_every": 0}
    settings["algorithm"] = {"advantage_estimator": "gae", "lam": 0.95}
    response_len = (1, 16) if packed else (2, 7)  # (2, 7): make_batch's default
    batches = [
        make_batch(vocab_size, groups=7, group_size=2, seed=i, response_len=response_len)
        for i in range(2)
    ]
    single = create_trainer(spec(tiny_model_dir, **settings))
    expected = [single.train_step(b) for b in batches]
    two = dict(settings)
    if packed:
        two["trainer"] = {**settings["trainer"], "packing": True, "max_tokens_per_micro_batch": 20}
    group = TrainerGroup.create(local_cluster, spec(tiny_model_dir, **two), timeout_s=300)
    try:
        got = [group.train_step(b) for b in batches]
    finally:
        group.close()
    for e, g in zip(expected, got, strict=True):
        assert (g["perf/packed"], g["critic/packed"]) == (float(packed), float(packed))
        for k in ("critic/vf_loss", "critic/grad_norm", "critic/vpred_mean", "actor/grad_norm"):
            assert g[k] == pytest.approx(e[k], rel=1e-4, abs=1e-7), k
    # step 2 trains on values the first update moved: equal only if it was the same update
    assert expected[1]["critic/values/mean"] != 0.0
    assert got[1]["critic/values/mean"] == pytest.approx(
        expected[1]["critic/values/mean"], rel=1e-4
    )


def test_trainer_cpu_threads_sets_the_ranks_torch_threads(tiny_model_dir: Path) -> None:
    """``trainer.cpu_threads`` is the rank's torch thread count on CPU (0: automatic)."""
    from nexrl.core.util.cpu import cpu_threads
    from nexrl.trainer.actor import TrainerActor

    before = torch.get_num_threads()
    try:
        for configured, expected in ((3, 3), (0, cpu_threads(1))):
            settings = {"trainer": {"cpu_threads": configured, "total_train_steps": 1}}
            actor = TrainerActor(spec(tiny_model_dir, **settings))
            info = actor.setup()
            assert info["cpu_threads"] == expected == torch.get_num_threads()
            actor.close()
    finally:
        torch.set_num_threads(before)


def test_too_few_gpu_workers_is_a_clear_error(
    local_cluster: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    s = spec(tiny_model_dir, trainer={"world_size": 3})
    with pytest.raises(TrainerGroupError, match=r"world_size=3 needs 3 Dask workers.*GPU>=1"):
        TrainerGroup.create(local_cluster, s)


def test_a_nan_on_one_rank_skips_the_update_on_both(
    local_cluster: Any, tiny_model_dir: Path, vocab_size: int, tmp_path: Path
) -> None:
    """Only rank 0's shard holds the NaN (row 0): the ranks agree (all-reduced) to drop
    the update, so neither applies it, neither waits for the other, and the next good
    batch trains on both."""
    good = make_batch(vocab_size, groups=7, group_size=2, seed=1)
    poisoned = make_batch(vocab_size, groups=7, group_size=2, seed=2)
    for key in ("old_log_probs", "behaviour_log_probs"):
        poisoned.tensors[key][0, 0] = float("nan")
    settings = _settings(tmp_path)
    settings["algorithm"] = {"do_old_log_prob_compute": False}
    group = TrainerGroup.create(local_cluster, spec(tiny_model_dir, **settings), timeout_s=300)
    try:
        group.train_step(good)
        before = group.full_state_dict()
        skipped = group.train_step(poisoned)
        after = group.full_state_dict()
        assert skipped["train/skipped_nonfinite"] == 1.0
        assert skipped["trainer/policy_version"] == 1.0
        assert before is not None and after is not None
        assert all(torch.equal(before[k], after[k]) for k in before)
        trained = group.train_step(good)
        assert trained["train/skipped_nonfinite"] == 0.0
        assert trained["trainer/policy_version"] == 2.0
    finally:
        group.close()
