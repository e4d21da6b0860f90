"""The training service over real HTTP (uvicorn on 127.0.0.1) on real DeepSpeed (CPU, gloo).

Accumulation semantics checked here (nexrl.trainer.service.core): the
gradients of ``forward_backward`` calls add up, each call's loss is the mean
over its loss units times ``weight``; so two calls weighted by their share of
the loss units, then ``optim_step``, is the fused step on the concatenation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from nexrl.trainer import create_trainer
from nexrl.trainer.service import TrainingClient, TrainingClientError
from nexrl.trainer.service.server import TrainingService, TrainingServiceStartError
from nexrl.trainer.service.wire import Datum, batch_from_data
from tests.integration.training_service._data import rows
from tests.unit.trainer._helpers import spec

os.environ.setdefault("DS_ACCELERATOR", "cpu")


@pytest.fixture(scope="module")
def vocab(tiny_model_dir: Path) -> int:
    return int(json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"])


def _spec(model: Path, tmp: Path, algorithm: dict[str, Any] | None = None, **trainer: Any) -> Any:
    return spec(
        model,
        trainer={"ppo_epochs": 1, "lr": 1e-2, **trainer},
        algorithm=algorithm or {},
        snapshot_dir=str(tmp / "snaps"),
        checkpoint_dir=str(tmp / "ck"),
    )


@pytest.fixture
def service(tiny_model_dir: Path, tmp_path: Path) -> Iterator[TrainingService]:
    with TrainingService(_spec(tiny_model_dir, tmp_path / "svc")) as svc:
        yield svc


@pytest.fixture
def client(service: TrainingService) -> Iterator[TrainingClient]:
    with TrainingClient(service.base_url, timeout_s=30, step_timeout_s=300) as c:
        yield c


def _weights(snapshot: str | Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(snapshot).glob("*.safetensors")):
        out.update(load_file(f))
    assert out, f"no safetensors in {snapshot}"
    return out


def _units(data: list[dict[str, Any]]) -> int:
    return sum(sum(r["loss_mask"]) for r in data)  # token-mean: trained tokens


def test_two_forward_backwards_and_one_optim_step_equal_one_fused_step(
    tiny_model_dir: Path, vocab: int, tmp_path: Path, client: TrainingClient
) -> None:
    data = rows(vocab, groups=4)
    a, b = data[:8], data[8:]  # groups 0-1 and 2-3: GRPO advantages are per group
    ua, ub = _units(a), _units(b)
    fused = create_trainer(_spec(tiny_model_dir, tmp_path / "fused"))
    expected = fused.step(batch_from_data([Datum(**r) for r in data])).metrics
    fused.publish_snapshot()

    info = client.info()
    assert info["recipe_policy_loss"] == "ppo_clip" and info["loss_agg_mode"] == "token-mean"
    ra = client.forward_backward(a, "ppo_clip", weight=ua / (ua + ub))
    rb = client.forward_backward(b, "ppo_clip", weight=ub / (ua + ub))
    assert ra["metrics"]["loss_units"] == ua and rb["metrics"]["loss_units"] == ub
    step = client.optim_step()
    assert (step["applied"], step["global_step"], step["policy_version"]) == (True, 1, 1)
    combined = (ra["loss"] * ua + rb["loss"] * ub) / (ua + ub)
    assert combined == pytest.approx(expected["actor/loss"], rel=1e-5)
    assert step["metrics"]["loss"] == pytest.approx(combined, rel=1e-6)
    assert step["metrics"]["grad_norm"] == pytest.approx(expected["actor/grad_norm"], rel=1e-5)
    assert step["metrics"]["grad_norm"] > 0.1  # a real update, not a no-op

    snap = client.save_weights_for_sampler()
    assert snap["version"] == 1 and Path(snap["path"]).name == "v1"
    assert client.save_weights_for_sampler() == snap  # same version: the same snapshot
    got, want = _weights(snap["path"]), _weights(tmp_path / "fused" / "snaps" / "v1")
    initial = {k: v for k, v in _weights(tiny_model_dir).items() if k in want}
    assert got.keys() == want.keys()
    moved = max(float((want[k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-3  # lr 1e-2: the step moved the weights
    for k, v in want.items():
        assert torch.allclose(got[k], v, atol=1e-6), k


def test_an_adaptive_kl_controller_moves_as_in_the_fused_step(
    tiny_model_dir: Path, vocab: int, tmp_path: Path
) -> None:
    algo = {"kl_loss_coef": 0.5, "kl_controller": "adaptive", "kl_target": 0.1, "kl_horizon": 20}
    data = rows(vocab, groups=4)
    a, b = data[:8], data[8:]
    ua, ub = _units(a), _units(b)
    fused = create_trainer(_spec(tiny_model_dir, tmp_path / "fused", algo))
    batch = batch_from_data([Datum(**r) for r in data])
    fused.step(batch)
    fused.step(batch)  # the second step's KL is > 0 (the policy moved off the reference)
    svc_spec = _spec(tiny_model_dir, tmp_path / "svc", algo)
    with TrainingService(svc_spec) as svc, TrainingClient(svc.base_url, timeout_s=30) as client:
        coefs = []
        for _ in range(2):
            client.forward_backward(a, "ppo_clip", weight=ua / (ua + ub))
            client.forward_backward(b, "ppo_clip", weight=ub / (ua + ub))
            coefs.append(client.optim_step()["metrics"]["kl_coef"])
    # adaptive (Ziegler et al.): coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * rows / horizon;
    # step 1 has KL 0 (policy == reference), 16 rows: 0.5 * (1 - 0.2 * 16 / 20) = 0.42
    assert coefs[0] == pytest.approx(0.42, rel=1e-6)
    assert coefs[1] == pytest.approx(float(fused.kl_ctrl.value), rel=1e-5)
    assert coefs[1] != pytest.approx(coefs[0], rel=1e-3)


def test_cross_entropy_is_the_mean_negative_log_likelihood_of_the_masked_tokens(
    tiny_model_dir: Path, vocab: int, client: TrainingClient
) -> None:
    from transformers import AutoModelForCausalLM

    data = rows(vocab, groups=1, group_size=3, seed=5)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    nll, n = 0.0, 0
    with torch.no_grad():  # by hand: one sequence at a time, no padding
        for r in data:
            ids = torch.tensor([r["prompt_ids"] + r["response_ids"]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
            p = len(r["prompt_ids"])
            for j, (tok, m) in enumerate(zip(r["response_ids"], r["loss_mask"], strict=True)):
                if m:
                    nll -= float(logp[p + j - 1, tok])
                    n += 1
    out = client.forward_backward(data, "cross_entropy")
    assert out["loss"] == pytest.approx(nll / n, rel=1e-5)
    assert out["metrics"]["loss_units"] == n
    assert client.optim_step()["applied"] is True


def test_save_state_and_load_state_round_trip(vocab: int, client: TrainingClient) -> None:
    d1, d2, d3 = (rows(vocab, groups=2, seed=s) for s in (1, 2, 3))
    client.forward_backward(d1, "ppo_clip")
    client.optim_step()
    saved = client.save_state({"cursor": 7})
    assert saved["global_step"] == 1 and Path(saved["path"]).name == "step_1"
    client.forward_backward(d2, "ppo_clip")
    second = client.optim_step()["metrics"]["grad_norm"]
    after_two = client.forward_backward(d3, "cross_entropy")["loss"]
    client.optim_step()
    assert client.info()["global_step"] == 3

    restored = client.load_state(saved["path"])
    assert (restored["global_step"], restored["policy_version"]) == (1, 1)
    assert client.extra_state() == {"cursor": 7}
    client.forward_backward(d2, "ppo_clip")  # step 2 again, from the restored weights + Adam
    assert client.optim_step()["metrics"]["grad_norm"] == pytest.approx(second, rel=1e-6)
    assert client.forward_backward(d3, "cross_entropy")["loss"] == pytest.approx(
        after_two, rel=1e-6
    )


def _refused(call: Any) -> TrainingClientError:
    with pytest.raises(TrainingClientError) as info:
        call()
    assert "\n" not in str(info.value)
    return info.value


def test_bad_input_gets_a_4xx_line_naming_the_field(vocab: int, client: TrainingClient) -> None:
    good = rows(vocab, groups=1, group_size=2)
    err = _refused(lambda: client.forward_backward(good, "ppo_clipp"))
    assert (err.status, err.field) == (400, "loss")
    assert "unknown loss 'ppo_clipp'" in str(err) and "cross_entropy" in str(err)

    short = [good[0], {**good[1], "loss_mask": good[1]["loss_mask"][:-1]}]
    err = _refused(lambda: client.forward_backward(short, "cross_entropy"))
    assert err.status == 400 and "data[1].loss_mask: length" in str(err)

    typo = [{**good[0], "prompt_ids": "12 13"}]
    err = _refused(lambda: client.forward_backward(typo, "cross_entropy"))
    assert (err.status, err.field) == (422, "data[0].prompt_ids")

    outside = [{**good[0], "response_ids": [vocab + 5] * len(good[0]["response_ids"])}]
    err = _refused(lambda: client.forward_backward(outside, "cross_entropy"))
    assert err.status == 400 and f"data[0].response_ids: token id {vocab + 5}" in str(err)

    err = _refused(lambda: client.forward_backward([], "cross_entropy"))
    assert (err.status, err.field) == (400, "data")
    err = _refused(client.optim_step)
    assert err.status == 409 and "call forward_backward first" in str(err)
    err = _refused(lambda: client.load_state("/nonexistent/step_3"))
    assert (err.status, err.field) == (404, "path")
    assert client.info()["pending_forward_backward"] == 0  # nothing half-accumulated


def test_a_token_guards_the_service_and_non_loopback_needs_one(
    service: TrainingService,
) -> None:
    assert service.core is not None
    with TrainingService(core=service.core, token="s3cret") as guarded:
        with TrainingClient(guarded.base_url, max_retries=0) as anonymous:
            err = _refused(anonymous.info)
            assert err.status == 401
        with TrainingClient(guarded.base_url, token="s3cret") as member:
            assert member.info()["global_step"] == 0
    with pytest.raises(TrainingServiceStartError, match="without a bearer token"):
        TrainingService(core=service.core, host="0.0.0.0", token="").start()
