"""Packed forwards and token-budget micro-batches give what the padded rows give.

``nexrl.trainer.packing``: one packed row per micro-batch; ``nexrl.trainer.microbatch``:
rows binned by tokens. Through the trainer's own ``forward``/``compute_loss`` and
``step`` on a real tiny Qwen2 (``PlainEngine``: one process, plain PyTorch).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from nexrl.trainer.microbatch import micro_batch, plan_micro_batches, token_bins
from nexrl.trainer.ops import model_inputs, response_log_probs, response_valid
from nexrl.trainer.packing import pack, packed_response_log_probs, packing_works
from tests.unit.trainer._helpers import make_batch, spec
from tests.unit.trainer._plain_engine import PlainEngine, plain_trainer

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def uneven(model_dir: Path, seed: int = 0) -> Any:
    """16 rows, prompts of 1-9 and responses of 1-20 tokens, with the model's own
    old log-probs and random advantages on the response tokens."""
    batch = make_batch(
        vocab_of(model_dir), seed=seed, model_dir=model_dir, prompt_len=(1, 9), response_len=(1, 20)
    )
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(batch["response_mask"].shape, generator=g, dtype=torch.float32)
    batch["advantages"] = adv * batch["response_mask"]
    return batch


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


def vocab_of(model_dir: Path) -> int:
    return int(json.loads((model_dir / "config.json").read_text())["vocab_size"])


def test_the_packed_layout_by_hand() -> None:
    from nexrl.core.types.batch import Batch

    # row 0: prompt [pad, 11, 12], response [21, 22, pad]; row 1: prompt [13], [23, 24, 25]
    ids = torch.tensor([[0, 11, 12, 21, 22, 0], [0, 0, 13, 23, 24, 25]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]])
    pos = torch.tensor([[0, 0, 1, 2, 3, 3], [0, 0, 0, 1, 2, 3]])
    batch = Batch(
        {
            "input_ids": ids,
            "attention_mask": attn,
            "position_ids": pos,
            "prompts": ids[:, :3],
            "responses": ids[:, 3:],
            "response_mask": attn[:, 3:],
        },
        {},
        0,
    )
    p = pack(batch)
    assert p.input_ids.tolist() == [[11, 12, 21, 22, 13, 23, 24, 25]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    # token t of row i is predicted at o_i + p_i + t - 1: row 0 at 1, 2; row 1 at 4, 5, 6
    assert p.source.tolist() == [[1, 2, 0], [4, 5, 6]]
    assert p.tokens == 8


def test_packed_log_probs_and_entropy_equal_the_padded(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    batch = uneven(model_dir)
    with torch.no_grad():
        logits = model(**model_inputs(batch)).logits
        want, want_h = response_log_probs(logits, batch.prompt_width, batch["responses"])
        got, got_h = packed_response_log_probs(model, batch)
    valid = response_valid(batch)
    assert want_h is not None and got_h is not None
    torch.testing.assert_close(got, torch.where(valid, want, 0.0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_h, torch.where(valid, want_h, 0.0), atol=1e-5, rtol=1e-5)
    assert bool((got[~valid] == 0).all())


@pytest.mark.parametrize("mode", MODES)
def test_packed_loss_and_gradients_equal_the_padded(model_dir: Path, mode: str) -> None:
    batch = uneven(model_dir, seed=1)
    grads, losses = [], []
    for packing in (False, True):
        algo = {"loss_agg_mode": mode, "loss_norm_length": 20.0, "entropy_coeff": 0.01}
        t = plain_trainer(spec(model_dir, trainer={"packing": packing}, algorithm=algo))
        assert t.packing is packing
        log_probs, entropy = t.forward(batch, entropy_grad=True)
        loss, _ = t.compute_loss(batch, log_probs, entropy)
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in t.engine.module.named_parameters()})
    torch.testing.assert_close(losses[1], losses[0], atol=1e-6, rtol=1e-5)
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-6, rtol=1e-4, msg=name)


def test_token_bins_first_fit_decreasing_by_hand() -> None:
    # longest first: 8 -> bin 0, 7 -> bin 1, 5 -> bin 2, 3 -> bin 1 (room 3), 2 -> bin 0
    assert token_bins([5, 3, 8, 2, 7], 10) == [[2, 3], [1, 4], [0]]
    assert token_bins([12, 1], 10) == [[0], [1]]  # longer than the budget: its own


def test_plan_pads_with_fillers_that_train_nothing(model_dir: Path) -> None:
    batch = uneven(model_dir)
    plan = plan_micro_batches(batch, 4, 40, count=12)
    rows = sorted(int(r) for mb in plan if not mb.filler for r in mb.rows)
    assert rows == list(range(len(batch)))  # every row once
    lengths = batch["attention_mask"].sum(1)
    for mb in plan:
        if not mb.filler and len(mb.rows) > 1:
            assert int(lengths[mb.rows].sum()) <= 40
    fillers = [mb for mb in plan if mb.filler]
    assert len(plan) == 12 and fillers
    assert int(micro_batch(batch, fillers[0])["response_mask"].sum()) == 0


@pytest.mark.parametrize("packing", [False, True])
def test_a_step_by_tokens_equals_the_step_by_rows(model_dir: Path, packing: bool) -> None:
    rows: list[dict[str, float]] = []
    params = []
    for trainer in (
        {"micro_batch_size": 16, "packing": False},  # the whole batch in one forward
        {"max_tokens_per_micro_batch": 48, "packing": packing},
    ):
        t = plain_trainer(spec(model_dir, trainer=trainer))
        batch = uneven(model_dir, seed=2)
        rows.append(t.train_step(batch))
        params.append(torch.cat([p.detach().flatten() for p in t.engine.module.parameters()]))
    for key in ("actor/loss", "actor/grad_norm", "actor/pg_loss"):
        if key in rows[0]:
            assert rows[1][key] == pytest.approx(rows[0][key], rel=1e-4, abs=1e-6), key
    # after one AdamW step (lr 1e-2): Adam divides by |g|, so float32 rounding in
    # near-zero gradients shows as ~1e-6 here
    torch.testing.assert_close(params[1], params[0], atol=2e-5, rtol=1e-4)


class _PositionsIgnored(torch.nn.Module):
    """A stand-in for a model whose attention ignores restarting positions: the tiny
    Qwen2 with ``position_ids`` dropped (it then attends across packed sequences)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, **_: Any) -> SimpleNamespace:
        return SimpleNamespace(logits=self.model(input_ids=input_ids).logits)


def test_a_model_that_attends_across_sequences_is_found(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cpu = torch.device("cpu")
    vocab = vocab_of(model_dir)
    assert packing_works(model, vocab, cpu)
    assert not packing_works(_PositionsIgnored(model), vocab, cpu)


def _rows_of_tokens(tokens: list[int]) -> Any:
    """One row per entry: a one-token prompt, ``n - 1`` response tokens (n >= 2)."""
    from nexrl.core.types.batch import Batch
    from nexrl.core.types.trajectory import Trajectory

    trajs = [
        Trajectory(
            prompt_ids=[1],
            response_ids=[2] * (n - 1),
            loss_mask=[1] * (n - 1),
            logprobs=[-1.0] * (n - 1),
            reward=0.0,
            group_id=i,
            run_id=0,
        )
        for i, n in enumerate(tokens)
    ]
    return Batch.from_trajectories(trajs, pad_token_id=0)


def test_shares_balance_tokens_and_come_back_in_batch_order() -> None:
    """Hand-worked: tokens 10, 2, 2, 8, 3, 3 on 2 ranks of 3 rows. Longest first onto the
    lighter rank with room: 10->r0, 8->r1, 3->r1 (11), 3->r0 (13), 2->r1 (13), 2->r0
    (r1 full): r0 rows 0, 2, 5 (15 tokens), r1 rows 1, 3, 4 (13). Contiguous shares
    would be 14 vs 14 here, but 20 vs 8 for 10, 8, 2 | 2, 3, 3 -- see below."""
    from nexrl.trainer.ops import shares, unshare

    batch = _rows_of_tokens([10, 2, 2, 8, 3, 3])
    padded, order = shares(batch, 2, by_tokens=True)
    assert len(padded) == 6 and order.tolist() == [0, 2, 5, 1, 3, 4]
    gathered = torch.arange(6)[order]  # what rank-major all_gather of row ids gives
    assert unshare(gathered, order, 6).tolist() == [0, 1, 2, 3, 4, 5]
    lopsided = _rows_of_tokens([10, 8, 2, 2, 3, 3])
    _, order = shares(lopsided, 2, by_tokens=True)
    tok = lopsided["attention_mask"].sum(1)
    assert [int(tok[order[:3]].sum()), int(tok[order[3:]].sum())] == [15, 13]
    _, contiguous = shares(lopsided, 2, by_tokens=False)
    assert contiguous.tolist() == [0, 1, 2, 3, 4, 5]


def test_shares_pad_to_equal_rows_and_drop_the_padding_coming_back() -> None:
    from nexrl.trainer.ops import shares, unshare

    batch = _rows_of_tokens([4, 9, 2, 6, 5])  # 5 rows on 2 ranks: one padding copy
    padded, order = shares(batch, 2, by_tokens=True)
    assert len(padded) == 6 and sorted(order.tolist()) == list(range(6))
    assert int(padded["response_mask"][5].sum()) == 0  # the copy trains on nothing
    back = unshare(torch.arange(6)[order].unsqueeze(1).float(), order, 5)
    assert back.squeeze(1).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def _critic(model_dir: Path, trainer: dict[str, Any]) -> Any:
    """A ``Critic`` on a ``PlainEngine`` whose value head is random (seeded), not 0: the
    values then depend on the trunk, so a packing mistake shows."""
    from nexrl.trainer.critic import Critic, load_value_model

    s = spec(model_dir, trainer=trainer)
    model, packs = load_value_model(str(model_dir), check_packing=s.trainer.packing)
    assert packs is s.trainer.packing
    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == 1]
    with torch.no_grad():
        head[-1].weight.copy_(
            torch.randn(head[-1].weight.shape, generator=torch.Generator().manual_seed(3))
        )
    engine = PlainEngine(model, s.trainer, total_optimizer_steps=10)
    return Critic(
        s.trainer,
        str(model_dir),
        total_optimizer_steps=10,
        dist_timeout_s=60,
        packing=packs,
        engine=engine,
    )


def test_a_packed_critic_by_tokens_equals_the_padded_one_by_rows(model_dir: Path) -> None:
    """PPO's value model: packed values and a token-budget update equal padded rows."""
    batch = uneven(model_dir, seed=3)
    g = torch.Generator().manual_seed(4)
    batch["returns"] = (
        torch.randn(batch["response_mask"].shape, generator=g) * batch["response_mask"]
    )
    values, metrics, params = [], [], []
    for trainer in (
        {"micro_batch_size": 16, "packing": False},
        {"max_tokens_per_micro_batch": 48, "packing": True},
    ):
        critic = _critic(model_dir, trainer)
        assert critic.packing is trainer["packing"]
        values.append(critic.compute_values(batch))
        batch["values"] = values[0]  # the same old values for both updates
        metrics.append(critic.update(batch))
        params.append(torch.cat([p.detach().flatten() for p in critic.engine.module.parameters()]))
    valid = response_valid(batch)
    assert float(values[0][valid].abs().min()) > 0  # the head is not zero: values carry the trunk
    torch.testing.assert_close(values[1], values[0], atol=1e-5, rtol=1e-5)
    for key in ("critic/vf_loss", "critic/grad_norm", "critic/vpred_mean", "critic/vf_clipfrac"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-6), key
    torch.testing.assert_close(params[1], params[0], atol=2e-5, rtol=1e-4)
