"""``PoolRows``: a batch's trajectories by their place in a real zarr pool. What a
trainer rank reads them back from (``BatchRef``) must equal what the driver read:
every field, in the chosen order, across writers whose metric columns differ, and
after a trip through JSON (the training service's wire)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import torch

from nexrl.core.pool import PoolRows, TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.types.batch import Batch
from nexrl.trainer.batch_io import BatchRef, load_batch
from tests.unit.pool._data import make_columns, must


def _pool_batch(tmp_path):
    pool = TrajectoryPool(
        PoolConfig(
            store=str(tmp_path / "pool.zarr"), batch_size=8, group_size=2, key_list=["group_id"]
        )
    )
    w1, w2 = pool.writer(), pool.writer()
    w1.append(make_columns([0, 2, 4, 6], group_size=2))
    w2.append(make_columns([1, 3, 5, 7], group_size=2, metrics=False))  # no metric columns
    return must(pool.get_batch())


def _same(a, b) -> None:
    for name in (
        "prompt_ids",
        "prompt_lens",
        "response_ids",
        "loss_mask",
        "logprobs",
        "response_lens",
        "reward",
        "group_id",
        "run_id",
        "policy_version",
        "meta_bytes",
        "meta_lens",
    ):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert sorted(a.metrics) == sorted(b.metrics)
    for k in a.metrics:
        assert np.array_equal(a.metrics[k], b.metrics[k], equal_nan=True), k


def test_rows_read_back_what_the_driver_read_in_any_order(tmp_path):
    batch = _pool_batch(tmp_path)
    assert isinstance(batch.rows, PoolRows) and len(batch.rows) == 8
    _same(batch.rows.read(), batch.columns)
    keep = np.array([5, 0, 7, 2, 3])
    _same(batch.rows.take(keep).read(), batch.columns.take(keep))
    uids = [json.loads(m)["extra_info"]["uid"] for m in map(batch.columns.meta, range(8))]
    got = batch.rows.take(keep).read()
    assert [json.loads(got.meta(i))["extra_info"]["uid"] for i in range(5)] == [
        uids[i] for i in keep
    ]
    # tokens without a read: prompt + response lengths
    cols = batch.columns
    assert batch.rows.tokens().tolist() == (cols.prompt_lens + cols.response_lens).tolist()


def test_rows_survive_json_and_another_process(tmp_path):
    batch = _pool_batch(tmp_path)
    rows = batch.rows.take([7, 6, 1, 0])
    doc = json.dumps(rows.to_json())  # NaN metric values (writer 2) as null: valid JSON
    assert "NaN" not in doc
    _same(PoolRows.from_json(json.loads(doc)).read(), rows.read())
    # a fresh process (a trainer rank) reads the same tokens from the store
    code = (
        "import json,sys; from nexrl.core.pool import PoolRows; "
        "c = PoolRows.from_json(json.loads(sys.stdin.read())).read(); "
        "print(json.dumps(c.response_ids.tolist()))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # as in Pants' sandbox
    out = subprocess.run(
        [sys.executable, "-c", code], input=doc, capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout) == rows.read().response_ids.tolist()


def test_batch_ref_loads_the_batch_the_driver_used_to_write(tmp_path):
    batch = _pool_batch(tmp_path)
    keep = np.array([1, 0, 3, 2])
    ref = BatchRef(batch.rows.take(keep), pad_token_id=5)
    want = Batch.from_columns(batch.columns.take(keep), 5)
    got = load_batch(BatchRef.from_json(json.loads(json.dumps(ref.to_json()))))
    assert sorted(got.tensors) == sorted(want.tensors)
    for k in want.tensors:
        assert torch.equal(got[k], want[k]), k
    assert got.meta == want.meta and len(ref) == 4


def test_a_missing_pool_is_one_clear_error(tmp_path):
    import pytest

    batch = _pool_batch(tmp_path)
    ref = BatchRef(batch.rows, 0)
    moved = BatchRef(
        PoolRows(
            str(tmp_path / "gone.zarr"),
            None,
            ref.rows.writers,
            ref.rows.metric_names,
            ref.rows.writer,
            ref.rows.rows,
            ref.rows.values,
        ),
        0,
    )
    with pytest.raises(
        ValueError, match=r"cannot read the step's 8 trajectories from the pool at .*gone\.zarr"
    ):
        load_batch(moved)
