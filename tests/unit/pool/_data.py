"""Deterministic trajectory data for pool tests: every field is a function of a uid,
so any trajectory read back can be checked whole."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np

from nexrl.core.pool import PoolBatch, TrajectoryColumns


def must(batch: PoolBatch | None) -> PoolBatch:
    """The batch, asserting there was one."""
    assert batch is not None, "expected a ready batch"
    return batch


def fields_of(uid: int, group_size: int = 1, version: int = 0) -> dict:
    plen = 3 + uid % 17
    rlen = 1 + (uid * 13) % 50
    ar, pr = np.arange(rlen), np.arange(plen)
    return {
        "prompt_ids": ((uid * 7 + pr) % 50_000).astype(np.int32),
        "response_ids": ((uid + ar * 3) % 50_000).astype(np.int32),
        "loss_mask": ((ar + uid) % 5 != 0).astype(np.int8),
        "logprobs": (-((uid + ar) % 100) / 100.0).astype(np.float32),
        "reward": np.float32((uid % 10) / 10),
        "group_id": uid // group_size,
        "run_id": uid % group_size,
        "policy_version": version,
        "meta": json.dumps(
            {
                "metrics": {"uid": float(uid), "rlen": float(rlen)},
                "extra_info": {"uid": uid, "gs": group_size, "tag": f"t{(uid // group_size) % 3}"},
                "data_item": {"prompt": f"p{uid // group_size}"},
            }
        ),
    }


def make_columns(
    uids: Iterable[int], group_size: int = 1, version: int | Iterable[int] = 0, metrics: bool = True
) -> TrajectoryColumns:
    uids = [int(u) for u in uids]
    versions = [version] * len(uids) if isinstance(version, int) else [int(v) for v in version]
    fs = [fields_of(u, group_size, v) for u, v in zip(uids, versions, strict=True)]
    return TrajectoryColumns.from_arrays(
        prompt_ids=np.concatenate([f["prompt_ids"] for f in fs]),
        prompt_lens=np.array([len(f["prompt_ids"]) for f in fs]),
        response_ids=np.concatenate([f["response_ids"] for f in fs]),
        loss_mask=np.concatenate([f["loss_mask"] for f in fs]),
        logprobs=np.concatenate([f["logprobs"] for f in fs]),
        response_lens=np.array([len(f["response_ids"]) for f in fs]),
        reward=np.array([f["reward"] for f in fs]),
        group_id=np.array([f["group_id"] for f in fs]),
        run_id=np.array([f["run_id"] for f in fs]),
        policy_version=np.array([f["policy_version"] for f in fs]),
        metrics={
            "uid": np.array(uids, np.float32),
            "rlen": np.array([len(f["response_ids"]) for f in fs], np.float32),
        }
        if metrics
        else None,
        meta=[f["meta"] for f in fs],
    )


def check_columns(cols: TrajectoryColumns) -> list[int]:
    """Assert every trajectory is exactly what ``make_columns`` wrote; return their uids."""
    from nexrl.core.pool.columns import offsets_of

    poff, roff = offsets_of(cols.prompt_lens), offsets_of(cols.response_lens)
    moff = offsets_of(cols.meta_lens)
    uids = []
    for i in range(len(cols)):
        meta = json.loads(cols.meta_bytes[moff[i] : moff[i + 1]].tobytes())
        uid = int(meta["extra_info"]["uid"])
        f = fields_of(uid, int(meta["extra_info"]["gs"]), int(cols.policy_version[i]))
        np.testing.assert_array_equal(cols.prompt_ids[poff[i] : poff[i + 1]], f["prompt_ids"])
        rs = slice(roff[i], roff[i + 1])
        np.testing.assert_array_equal(cols.response_ids[rs], f["response_ids"])
        np.testing.assert_array_equal(cols.loss_mask[rs], f["loss_mask"])
        np.testing.assert_array_equal(cols.logprobs[rs], f["logprobs"])
        assert cols.reward[i] == f["reward"]
        assert cols.group_id[i] == f["group_id"] and cols.run_id[i] == f["run_id"]
        if "uid" in cols.metrics:
            assert cols.metrics["uid"][i] == uid
        uids.append(uid)
    return uids


def random_columns(
    n: int,
    rng: np.random.Generator,
    tokens: tuple[int, int] = (64, 512),
    group_size: int = 8,
    first_group: int = 0,
    version: int = 0,
) -> TrajectoryColumns:
    """Benchmark-style random block: token ids in a 150k vocabulary."""
    pl = rng.integers(tokens[0] // 4, tokens[1] // 4, n)
    rl = rng.integers(tokens[0], tokens[1], n)
    R = int(rl.sum())
    return TrajectoryColumns.from_arrays(
        prompt_ids=rng.integers(0, 150_000, int(pl.sum()), dtype=np.int32),
        prompt_lens=pl,
        response_ids=rng.integers(0, 150_000, R, dtype=np.int32),
        loss_mask=(rng.random(R) > 0.05).astype(np.int8),
        logprobs=(-np.abs(rng.standard_normal(R)) * 0.5).astype(np.float32),
        response_lens=rl,
        reward=rng.random(n).astype(np.float32),
        group_id=first_group + np.arange(n) // group_size,
        run_id=np.arange(n) % group_size,
        policy_version=np.full(n, version),
    )


def _expected_flat(u: np.ndarray) -> dict[str, np.ndarray]:
    from nexrl.core.pool.columns import offsets_of

    plen, rlen = 3 + u % 17, 1 + (u * 13) % 50
    pu, ru = np.repeat(u, plen), np.repeat(u, rlen)
    pp = np.arange(int(plen.sum())) - np.repeat(offsets_of(plen)[:-1], plen)
    rp = np.arange(int(rlen.sum())) - np.repeat(offsets_of(rlen)[:-1], rlen)
    return {
        "prompt_lens": plen,
        "response_lens": rlen,
        "prompt_ids": ((pu * 7 + pp) % 50_000).astype(np.int32),
        "response_ids": ((ru + rp * 3) % 50_000).astype(np.int32),
        "loss_mask": ((rp + ru) % 5 != 0).astype(np.int8),
        "logprobs": (-((ru + rp) % 100) / 100.0).astype(np.float32),
        "reward": ((u % 10) / 10).astype(np.float32),
    }


def fast_columns(uids: np.ndarray) -> TrajectoryColumns:
    """``make_columns(uids)`` token content (group_size 1, version 0), built vectorised; the
    uid is the group id; no metrics, so the meta JSON is constant (cheap)."""
    u = np.asarray(uids, dtype=np.int64)
    e = _expected_flat(u)
    return TrajectoryColumns.from_arrays(
        prompt_ids=e["prompt_ids"],
        prompt_lens=e["prompt_lens"],
        response_ids=e["response_ids"],
        loss_mask=e["loss_mask"],
        logprobs=e["logprobs"],
        response_lens=e["response_lens"],
        reward=e["reward"],
        group_id=u,
        metrics={"uid": u.astype(np.float32)},
    )


def fast_check(cols: TrajectoryColumns) -> np.ndarray:
    """Vectorised ``check_columns`` for ``fast_columns`` data; returns the uids."""
    u = cols.group_id.astype(np.int64)
    e = _expected_flat(u)
    for name, want in e.items():
        np.testing.assert_array_equal(getattr(cols, name), want, err_msg=name)
    return u
