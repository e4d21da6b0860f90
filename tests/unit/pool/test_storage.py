"""Columns, small-file store and direct chunk I/O (checked against zarr itself)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zarr

from nexrl.core.pool import Chunking, PoolDataError, PoolStoreError, TrajectoryColumns
from nexrl.core.pool.columns import PROMPT_DTYPE, RESPONSE_DTYPES, SCALAR_DTYPES
from nexrl.core.pool.kv import FsspecKV, LocalKV, open_kv
from nexrl.core.pool.layout import COL, ensure_pool
from nexrl.core.pool.segment import Positions, Segment
from nexrl.core.types.trajectory import RAGGED_FIELDS, SCALAR_FIELDS, Trajectory
from tests.unit.pool._data import check_columns, make_columns


def test_dtypes_match_trajectory_contract():
    assert {k: np.dtype(v) for k, v in RAGGED_FIELDS.items()} == {
        "prompt_ids": PROMPT_DTYPE,
        **RESPONSE_DTYPES,
    }
    assert {k: np.dtype(v) for k, v in SCALAR_FIELDS.items()} == SCALAR_DTYPES


def test_columns_roundtrip_through_trajectory_records():
    trajs = [
        Trajectory(
            [1, 2],
            [3, 4, 5],
            [1, 0, 1],
            [-0.5, -0.25, -0.125],
            1.5,
            7,
            1,
            3,
            metrics={"acc": 1.0},
            extra_info={"x": [1, 2]},
            data_item={"q": "hi"},
        ),
        Trajectory([9], [8], [1], [0.0], -2.0, 7, 0, 4),
    ]
    cols = TrajectoryColumns.from_trajectories(trajs)
    assert len(cols) == 2 and cols.metrics["acc"][0] == 1.0 and np.isnan(cols.metrics["acc"][1])
    assert cols.to_trajectories() == trajs
    assert cols.take(np.array([1, 0])).to_trajectories() == trajs[::-1]
    both = TrajectoryColumns.concat([cols, make_columns([5])])
    assert len(both) == 3 and set(both.metrics) == {"acc", "uid", "rlen"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"loss_mask": np.array([2, 1, 1])}, "loss_mask"),
        ({"reward": np.array([np.nan])}, "reward"),
        ({"logprobs": np.array([0.5, -1, -1])}, "logprobs"),
        ({"response_lens": np.array([4])}, "flat length"),
        ({"prompt_ids": np.array([-1, 2])}, "prompt_ids"),
    ],
)
def test_columns_validation_names_the_field(change, field):
    kw: dict[str, Any] = dict(
        prompt_ids=np.array([1, 2]),
        prompt_lens=np.array([2]),
        response_ids=np.array([1, 2, 3]),
        loss_mask=np.array([1, 1, 1]),
        logprobs=np.array([-1.0, -1, -1]),
        response_lens=np.array([3]),
        reward=np.array([1.0]),
        group_id=np.array([0]),
    )
    kw.update(change)
    with pytest.raises(PoolDataError, match=field):
        TrajectoryColumns.from_arrays(**kw)


def test_local_kv_atomic_exclusive_and_listing(tmp_path):
    kv = LocalKV(tmp_path)
    assert kv.put("a/x.json", b"1", exclusive=True)
    assert not kv.put("a/x.json", b"2", exclusive=True)
    assert kv.get("a/x.json") == b"1"
    kv.put("a/x.json", b"3")
    assert kv.get("a/x.json") == b"3" and kv.get("a/nope") is None
    (tmp_path / "a" / ".x.json.123.tmp").write_bytes(b"partial")  # a killed writer's leftover
    assert kv.listdir("a") == ["x.json"] and kv.listdir("missing") == []
    kv.put_many({"b/c/0": b"x", "b/c/1": b"y"})
    assert kv.get_many(["b/c/0", "b/c/1", "b/c/2"]) == {"b/c/0": b"x", "b/c/1": b"y"}


def test_fsspec_kv_on_memory_filesystem():
    kv = open_kv("memory://kvtest/pool.zarr")
    assert isinstance(kv, FsspecKV)
    assert kv.put("a/x.json", b"1", exclusive=True)
    assert not kv.put("a/x.json", b"2", exclusive=True)
    assert kv.get("a/x.json") == b"1" and kv.listdir("a") == ["x.json"]
    kv.put_many({"c/0": b"x", "c/1": b"y"})
    assert kv.get_many(["c/0", "c/2"]) == {"c/0": b"x"}


def test_ensure_pool_refuses_foreign_zarr_store(tmp_path):
    zarr.create_group(str(tmp_path / "other.zarr"))
    with pytest.raises(PoolStoreError, match="not a NexRL trajectory pool"):
        ensure_pool(LocalKV(tmp_path / "other.zarr"))
    ensure_pool(LocalKV(tmp_path / "pool.zarr"))
    ensure_pool(LocalKV(tmp_path / "pool.zarr"))  # idempotent, create-only


@pytest.mark.parametrize("codec", ["lz4", "none"])
def test_direct_chunk_io_is_plain_zarr(tmp_path, codec):
    url = str(tmp_path / "pool.zarr")
    ensure_pool(LocalKV(url))
    ch = Chunking(row_chunk=4, token_chunk=16, meta_chunk=64, metric_chunk=2, codec=codec)
    seg = Segment.create(url, "w1", ch, None)
    cols = make_columns(range(10))
    pos = Positions().aligned(ch)
    seg.write(cols, pos, {"rlen": 1, "uid": 2}, weight_sync=True, created_ns=123)
    pos2 = pos.after(cols).aligned(ch)
    cols2 = make_columns(range(10, 13))
    seg.write(cols2, pos2, {"rlen": 1, "uid": 2}, weight_sync=False, created_ns=456)
    # zarr itself reads what the direct writer wrote
    z: Any = zarr.open_group(str(tmp_path / "pool.zarr" / "segments" / "w1"), mode="r")
    assert (z["prompt_ids"][: len(cols.prompt_ids)] == cols.prompt_ids).all()
    assert (
        z["logprobs"][pos2.response : pos2.response + len(cols2.logprobs)] == cols2.logprobs
    ).all()
    np.testing.assert_array_equal(z["values"][:10, 0], cols.reward)
    np.testing.assert_array_equal(z["values"][:10, 2], cols.metrics["uid"])
    assert np.isnan(z["values"][:10, 3]).all()
    rows = z["rows"]
    assert (rows[:10, COL["weight_sync"]] == 1).all()
    assert (rows[pos2.row : pos2.row + 3, COL["created_ns"]] == 456).all()
    # and the direct reader reads it back whole
    ro = Segment.open(url, "w1", None)
    (rows, values), (rows2, values2) = ro.read_index([(pos.row, 10, 2), (pos2.row, 3, 2)])
    from nexrl.core.pool.segment import read_columns

    back = read_columns(
        ro, np.concatenate([rows2, rows]), np.concatenate([values2, values]), ("rlen", "uid")
    )
    assert check_columns(back) == [10, 11, 12, *range(10)]


def test_direct_reader_reads_zarr_written_chunks(tmp_path):
    from nexrl.core.pool.chunkio import ChunkedArray

    url = tmp_path / "a.zarr"
    g = zarr.create_group(str(url))
    arr: Any = g.create_array(
        "x",
        shape=(1000,),
        chunks=(64,),
        dtype="int32",
        fill_value=-1,
        chunk_key_encoding={"name": "default", "separator": "/"},
        compressors=Chunking().compressors(4),
        filters=None,
    )
    arr[100:300] = np.arange(200)
    io = ChunkedArray.from_zarr(LocalKV(url), "x", arr)
    starts, lens = np.array([5, 100, 150, 299, 640, 60]), np.array([3, 50, 100, 1, 0, 10])
    want = np.concatenate([arr[:][s : s + n] for s, n in zip(starts, lens, strict=True)])
    np.testing.assert_array_equal(io.take_ranges(starts, lens), want)
