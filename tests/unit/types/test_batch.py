"""Batch: padded layout from trajectories, indexing, concat, padding removal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from nexrl.core.types import Batch, BatchError, Trajectory

PAD = 99


def _t1() -> Trajectory:
    return Trajectory(
        prompt_ids=[5, 6, 7],
        response_ids=[8, 9],
        loss_mask=[1, 0],
        logprobs=[-0.5, -0.25],
        reward=1.0,
        group_id=3,
        run_id=0,
        policy_version=2,
        metrics={"acc": 1.0},
        extra_info={"k": "a"},
        data_item={"prompt": "p1"},
    )


def _t2() -> Trajectory:
    return Trajectory(
        prompt_ids=[11],
        response_ids=[12, 13, 14],
        loss_mask=[1, 1, 1],
        logprobs=[-1.0, -2.0, -3.0],
        reward=0.0,
        group_id=3,
        run_id=1,
        policy_version=1,
        metrics={"acc": 0.0},
        data_item={"prompt": "p2"},
    )


def _t3() -> Trajectory:
    return Trajectory(
        prompt_ids=[21, 22],
        response_ids=[23],
        loss_mask=[1],
        logprobs=[-0.125],
        reward=0.5,
        group_id=4,
    )


def _tensor(rows: Sequence[Any], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


def assert_batches_equal(a: Batch, b: Batch) -> None:
    assert set(a.tensors) == set(b.tensors)
    for k in a.tensors:
        assert a.tensors[k].dtype == b.tensors[k].dtype, k
        assert torch.equal(a.tensors[k], b.tensors[k]), (k, a.tensors[k], b.tensors[k])
    assert a.meta == b.meta
    assert a.pad_token_id == b.pad_token_id


def test_from_trajectories_layout() -> None:
    b = Batch.from_trajectories([_t1(), _t2()], pad_token_id=PAD)
    i64, f32 = torch.int64, torch.float32
    expected = {
        "prompts": _tensor([[5, 6, 7], [PAD, PAD, 11]], i64),
        "responses": _tensor([[8, 9, PAD], [12, 13, 14]], i64),
        "input_ids": _tensor([[5, 6, 7, 8, 9, PAD], [PAD, PAD, 11, 12, 13, 14]], i64),
        "attention_mask": _tensor([[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]], i64),
        "position_ids": _tensor([[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]], i64),
        "response_mask": _tensor([[1, 0, 0], [1, 1, 1]], i64),
        "old_log_probs": _tensor([[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0]], f32),
        "behaviour_log_probs": _tensor([[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0]], f32),
        "rewards": _tensor([1.0, 0.0], f32),
        "group_ids": _tensor([3, 3], i64),
        "run_ids": _tensor([0, 1], i64),
        "policy_versions": _tensor([2, 1], i64),
    }
    assert set(b.tensors) == set(expected)
    for k, v in expected.items():
        assert b[k].dtype == v.dtype, k
        assert torch.equal(b[k], v), (k, b[k])
    assert b.meta == {
        "metrics": [{"acc": 1.0}, {"acc": 0.0}],
        "extra_info": [{"k": "a"}, {}],
        "data_item": [{"prompt": "p1"}, {"prompt": "p2"}],
    }
    assert len(b) == 2 and b.prompt_width == 3 and b.response_width == 3
    # old and behaviour log-probs are independent tensors (a trainer overwrites old_log_probs).
    b["old_log_probs"].zero_()
    assert b["behaviour_log_probs"][1, 2] == -3.0


def test_from_columns_equals_from_trajectories() -> None:
    # the controller builds its batch straight from the pool's columns
    from nexrl.core.pool.columns import TrajectoryColumns
    from tests.unit.pool._data import make_columns

    trajs = [_t1(), _t2(), _t3()]
    cols = TrajectoryColumns.from_trajectories(trajs)
    assert_batches_equal(Batch.from_columns(cols, PAD), Batch.from_trajectories(trajs, PAD))
    pooled = make_columns([4, 0, 7, 3], group_size=2, version=[1, 2, 3, 4])
    picked = pooled.take(np.array([2, 0, 3]))
    assert_batches_equal(
        Batch.from_columns(picked, PAD), Batch.from_trajectories(picked.to_trajectories(), PAD)
    )
    with pytest.raises(BatchError, match="no trajectories"):
        Batch.from_columns(pooled.take(np.array([], dtype=np.int64)))


def test_from_no_trajectories_is_an_error() -> None:
    with pytest.raises(BatchError, match="no trajectories"):
        Batch.from_trajectories([])


def test_indexing_by_slice_int_list_tensor_and_mask() -> None:
    b = Batch.from_trajectories([_t1(), _t2(), _t3()], pad_token_id=PAD)
    tail = b[1:]
    assert len(tail) == 2
    assert torch.equal(tail["group_ids"], torch.tensor([3, 4]))
    assert tail.meta["data_item"] == [{"prompt": "p2"}, {}]

    picked = b[torch.tensor([2, 0])]
    assert torch.equal(picked["rewards"], torch.tensor([0.5, 1.0]))
    assert picked.meta["metrics"] == [{}, {"acc": 1.0}]
    assert_batches_equal(b[[2, 0]], picked)

    masked = b[b["rewards"] > 0.25]
    assert torch.equal(masked["run_ids"], torch.tensor([0, 0]))
    assert masked.meta["data_item"] == [{"prompt": "p1"}, {}]

    one = b[-1]
    assert len(one) == 1 and one["input_ids"].shape == (1, 6)
    assert torch.equal(one["input_ids"], torch.tensor([[PAD, 21, 22, 23, PAD, PAD]]))
    with pytest.raises(IndexError):
        b[3]
    with pytest.raises(KeyError, match="advantages"):
        b["advantages"]


def test_concat_pads_to_the_widest_and_matches_batching_together() -> None:
    a = Batch.from_trajectories([_t1()], pad_token_id=PAD)  # P=3, R=2
    c = Batch.from_trajectories([_t2()], pad_token_id=PAD)  # P=1, R=3
    assert (a.prompt_width, a.response_width, c.prompt_width, c.response_width) == (3, 2, 1, 3)
    together = Batch.concat([a, c])
    assert_batches_equal(together, Batch.from_trajectories([_t1(), _t2()], pad_token_id=PAD))


def test_concat_pads_added_tensors_by_their_side() -> None:
    a = Batch.from_trajectories([_t1()], pad_token_id=PAD)
    c = Batch.from_trajectories([_t2()], pad_token_id=PAD)
    a["advantages"] = torch.tensor([[0.5, 0.5]])
    c["advantages"] = torch.tensor([[-1.0, -1.0, -1.0]])
    a["values"] = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])  # full sequence, P+R = 5
    c["values"] = torch.tensor([[6.0, 7.0, 8.0, 9.0]])  # P+R = 4
    out = Batch.concat([a, c])
    assert torch.equal(out["advantages"], torch.tensor([[0.5, 0.5, 0.0], [-1.0, -1.0, -1.0]]))
    assert torch.equal(
        out["values"],
        torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 0.0], [0.0, 0.0, 6.0, 7.0, 8.0, 9.0]]),
    )


def test_concat_rejects_mismatched_batches() -> None:
    a = Batch.from_trajectories([_t1()])
    c = Batch.from_trajectories([_t2()])
    c["advantages"] = torch.zeros(1, 3)
    with pytest.raises(BatchError, match="advantages"):
        Batch.concat([a, c])
    with pytest.raises(BatchError, match="pad_token_id"):
        Batch.concat([a, Batch.from_trajectories([_t2()], pad_token_id=PAD)])
    d = Batch.from_trajectories([_t2()])
    d.meta["temperature"] = 1.0
    a.meta["temperature"] = 0.7
    with pytest.raises(BatchError, match="temperature"):
        Batch.concat([a, d])
    with pytest.raises(BatchError, match="no batches"):
        Batch.concat([])


def test_global_meta_is_kept_and_per_row_meta_concatenated() -> None:
    a = Batch.from_trajectories([_t1()], pad_token_id=PAD)
    c = Batch.from_trajectories([_t2(), _t3()], pad_token_id=PAD)
    a.meta["step"] = c.meta["step"] = 7
    out = Batch.concat([a, c])
    assert out.meta["step"] == 7
    assert out.meta["data_item"] == [{"prompt": "p1"}, {"prompt": "p2"}, {}]
    assert out[1:].meta["step"] == 7


def test_remove_redundant_left_padding() -> None:
    # Rows t2 (prompt 1 token) and t3 (2 tokens), padded out to prompt width 4.
    b = Batch.from_trajectories([_t2(), _t3()], pad_token_id=PAD).pad_to(4, 3)
    assert torch.equal(b["prompts"], torch.tensor([[PAD, PAD, PAD, 11], [PAD, PAD, 21, 22]]))
    out = b.remove_redundant_left_padding()
    # Only the two columns that are padding in both rows go.
    assert torch.equal(out["prompts"], torch.tensor([[PAD, 11], [21, 22]]))
    assert torch.equal(
        out["input_ids"], torch.tensor([[PAD, 11, 12, 13, 14], [21, 22, 23, PAD, PAD]])
    )
    assert torch.equal(out["attention_mask"], torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
    assert torch.equal(out["position_ids"], torch.tensor([[0, 0, 1, 2, 3], [0, 1, 2, 2, 2]]))
    assert torch.equal(out["responses"], b["responses"])
    assert_batches_equal(out, Batch.from_trajectories([_t2(), _t3()], pad_token_id=PAD))


def test_remove_redundant_right_padding() -> None:
    b = Batch.from_trajectories([_t1(), _t2(), _t3()], pad_token_id=PAD)
    sub = b[torch.tensor([0, 2])]  # responses of 2 and 1 tokens in a width-3 layout
    out = sub.remove_redundant_right_padding()
    assert torch.equal(out["responses"], torch.tensor([[8, 9], [23, PAD]]))
    assert torch.equal(out["response_mask"], torch.tensor([[1, 0], [1, 0]]))
    assert torch.equal(out["old_log_probs"], torch.tensor([[-0.5, -0.25], [-0.125, 0.0]]))
    assert torch.equal(out["input_ids"], torch.tensor([[5, 6, 7, 8, 9], [PAD, 21, 22, 23, PAD]]))
    assert torch.equal(out["attention_mask"], torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]]))
    assert torch.equal(out["position_ids"], torch.tensor([[0, 1, 2, 3, 4], [0, 0, 1, 2, 2]]))
    assert_batches_equal(out, Batch.from_trajectories([_t1(), _t3()], pad_token_id=PAD))


def test_removing_padding_from_any_subset_equals_batching_that_subset() -> None:
    trajs = [_t1(), _t2(), _t3()]
    full = Batch.from_trajectories(trajs, pad_token_id=PAD)
    assert_batches_equal(full.remove_redundant_left_padding(), full)
    assert_batches_equal(full.remove_redundant_right_padding(), full)
    for rows in ([0], [1], [2], [0, 1], [1, 2], [0, 2], [2, 1, 0]):
        sub = full[rows].remove_redundant_left_padding().remove_redundant_right_padding()
        assert_batches_equal(
            sub, Batch.from_trajectories([trajs[i] for i in rows], pad_token_id=PAD)
        )


def test_pad_to_multiple_pads_the_response_side() -> None:
    b = Batch.from_trajectories([_t1(), _t2()], pad_token_id=PAD)  # P+R = 6
    out = b.pad_to_multiple(4)
    assert (out.prompt_width, out.response_width) == (3, 5)
    assert torch.equal(
        out["input_ids"],
        torch.tensor([[5, 6, 7, 8, 9, PAD, PAD, PAD], [PAD, PAD, 11, 12, 13, 14, PAD, PAD]]),
    )
    assert torch.equal(
        out["position_ids"], torch.tensor([[0, 1, 2, 3, 4, 4, 4, 4], [0, 0, 0, 1, 2, 3, 3, 3]])
    )
    assert torch.equal(out["response_mask"], torch.tensor([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]))
    assert_batches_equal(out.remove_redundant_right_padding(), b)
    assert_batches_equal(b.pad_to_multiple(3), b)
    with pytest.raises(BatchError, match="n must be >= 1"):
        b.pad_to_multiple(0)


def test_pad_rows_to_multiple_adds_masked_copies() -> None:
    b = Batch.from_trajectories([_t1(), _t2(), _t3()], pad_token_id=PAD)
    padded, added = b.pad_rows_to_multiple(4)
    assert added == 1 and len(padded) == 4
    assert torch.equal(padded["input_ids"][3], b["input_ids"][0])
    assert torch.equal(padded["response_mask"][3], torch.zeros(3, dtype=torch.int64))
    assert padded.meta["data_item"][3] == {"prompt": "p1"}
    assert_batches_equal(padded[: len(padded) - added], b)
    same, none = b.pad_rows_to_multiple(3)
    assert none == 0 and same is b
    padded8, added8 = b.pad_rows_to_multiple(8)
    assert added8 == 5 and torch.equal(padded8["group_ids"], torch.tensor([3, 3, 4, 3, 3, 4, 3, 3]))


def test_inconsistent_batches_are_rejected_with_the_key() -> None:
    with pytest.raises(BatchError, match="'b'"):
        Batch({"a": torch.zeros(2, 3), "b": torch.zeros(3)})
    with pytest.raises(BatchError, match=r"meta\['uids'\]"):
        Batch({"a": torch.zeros(2)}, {"uids": ["x"]})
    b = Batch.from_trajectories([_t1(), _t2()])
    with pytest.raises(BatchError, match="advantages"):
        b["advantages"] = torch.zeros(3, 3)
    b["advantages"] = torch.zeros(2, 3)
    assert "advantages" in b and "advantages" in list(b.keys())


def test_to_device_copies_tensors_and_keeps_meta() -> None:
    b = Batch.from_trajectories([_t1(), _t2()], pad_token_id=PAD)
    moved = b.to("cpu")
    assert_batches_equal(moved, b)
    assert moved.tensors is not b.tensors
    moved.meta["extra"] = 1
    assert "extra" not in b.meta


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_round_trip_and_indexing_on_device() -> None:
    b = Batch.from_trajectories([_t1(), _t2(), _t3()], pad_token_id=PAD).to("cuda")
    assert b["input_ids"].is_cuda
    sub = b[torch.tensor([2, 0], device="cuda")]
    sub = sub.remove_redundant_left_padding().remove_redundant_right_padding()
    expected = Batch.from_trajectories([_t3(), _t1()], pad_token_id=PAD)
    out = Batch.concat([sub, sub]).to("cpu")
    assert_batches_equal(out, Batch.concat([expected, expected]))
