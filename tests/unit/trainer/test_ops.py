"""Trainer tensor helpers: log-probs from logits, sharding, micro-batches, loss units."""

from __future__ import annotations

import torch

from nexrl.trainer.ops import loss_units, micro_batches, rank_share, response_log_probs
from tests.unit.trainer._helpers import make_batch


def test_response_log_probs_match_a_per_token_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 7, 11, generator=gen)
    responses = torch.tensor([[3, 4, 5], [1, 0, 9]])
    lp, ent = response_log_probs(logits, 4, responses, entropy_grad=False)
    for b in range(2):
        for t in range(3):
            ref = torch.log_softmax(logits[b, 3 + t], -1)[responses[b, t]]
            assert torch.allclose(lp[b, t], ref, atol=1e-6)
            p = torch.softmax(logits[b, 3 + t], -1)
            assert ent is not None
            assert torch.allclose(ent[b, t], -(p * p.log()).sum(), atol=1e-5)


def test_shards_have_equal_rows_and_padding_rows_carry_no_loss() -> None:
    batch = make_batch(50, groups=5, group_size=1)  # 5 rows over 2 ranks
    (a, _), (b, _) = (rank_share(batch, r, 2, by_tokens=False) for r in (0, 1))
    assert len(a) == len(b) == 3
    assert int(b["response_mask"][-1].sum()) == 0  # the padding copy
    assert loss_units(a, "token-mean") + loss_units(b, "token-mean") == loss_units(
        batch, "token-mean"
    )
    assert loss_units(batch, "seq-mean-token-mean") == 5


def test_micro_batches_cover_rows_and_crop_shared_padding() -> None:
    batch = make_batch(50, groups=3, group_size=3)
    mbs = micro_batches(batch, 4)
    assert [len(m) for m in mbs] == [4, 4, 1]
    assert mbs[-1].response_width == int(batch[8]["attention_mask"][0, batch.prompt_width :].sum())
    assert sum(int(m["response_mask"].sum()) for m in mbs) == int(batch["response_mask"].sum())
