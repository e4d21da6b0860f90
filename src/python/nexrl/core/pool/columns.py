"""``TrajectoryColumns``: a block of trajectories as flat arrays + lengths.

This is the in-memory form the pool writes and hands back: ragged per-token
fields are concatenated into one flat array each (``prompt_ids``; and
``response_ids``, ``loss_mask``, ``logprobs`` which share the response
lengths), scalars are one array per field, metrics are float32 columns with NaN
where a trajectory has no value, and the JSON meta string of
``Trajectory.to_record`` is kept as UTF-8 bytes + lengths.

Converting to and from ``Trajectory`` goes through ``Trajectory.to_record`` /
``from_record`` (the pool format contract); the columnar constructors let a bulk
producer skip per-object work.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nexrl.core.errors import NexrlError
from nexrl.core.types.columns import PROMPT_DTYPE, RESPONSE_DTYPES, SCALAR_DTYPES, Columns

if TYPE_CHECKING:
    from nexrl.core.types.trajectory import Trajectory

__all__ = ["PoolDataError", "TrajectoryColumns", "offsets_of", "ranges_index"]


class PoolDataError(ValueError, NexrlError):
    """Trajectory data handed to the pool is malformed; the message names the field."""


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """Start offsets (length n+1, int64) of consecutive segments with ``lengths``."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def ranges_index(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each pair, vectorised."""
    lens = np.asarray(lens, dtype=np.int64)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    base = np.repeat(np.asarray(starts, dtype=np.int64) - offsets_of(lens)[:-1], lens)
    return base + np.arange(total, dtype=np.int64)


@dataclass
class TrajectoryColumns(Columns):
    """``n`` trajectories, column-wise (the fields of ``nexrl.core.types.columns.Columns``)
    plus their metric columns. Flat arrays are in trajectory order."""

    metrics: dict[str, np.ndarray] = field(default_factory=dict)

    # -- construction ------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        *,
        prompt_ids: np.ndarray,
        prompt_lens: np.ndarray,
        response_ids: np.ndarray,
        loss_mask: np.ndarray,
        logprobs: np.ndarray,
        response_lens: np.ndarray,
        reward: np.ndarray,
        group_id: np.ndarray,
        run_id: np.ndarray | None = None,
        policy_version: np.ndarray | None = None,
        policy_version_last: np.ndarray | None = None,
        metrics: dict[str, np.ndarray] | None = None,
        meta: Sequence[str] | None = None,
    ) -> TrajectoryColumns:
        """Bulk constructor: casts dtypes, builds the meta JSON when not given, validates."""
        n = len(prompt_lens)
        metrics = {k: np.asarray(v, dtype=np.float32) for k, v in (metrics or {}).items()}
        if meta is None and not metrics:
            one = np.frombuffer(_EMPTY_META, dtype=np.uint8)
            meta_bytes, meta_lens = np.tile(one, n), np.full(n, len(one), np.int64)
        else:
            if meta is None:
                meta = [_meta_json(metrics, i) for i in range(n)]
            raw = [m.encode() for m in meta]
            meta_bytes = np.frombuffer(b"".join(raw), dtype=np.uint8).copy()
            meta_lens = np.fromiter((len(r) for r in raw), dtype=np.int64, count=n)
        version = (
            np.zeros(n, np.int64)
            if policy_version is None
            else np.asarray(policy_version, dtype=np.int64)
        )
        cols = cls(
            prompt_ids=np.asarray(prompt_ids, dtype=PROMPT_DTYPE),
            prompt_lens=np.asarray(prompt_lens, dtype=np.int64),
            response_ids=np.asarray(response_ids, dtype=RESPONSE_DTYPES["response_ids"]),
            loss_mask=np.asarray(loss_mask, dtype=RESPONSE_DTYPES["loss_mask"]),
            logprobs=np.asarray(logprobs, dtype=RESPONSE_DTYPES["logprobs"]),
            response_lens=np.asarray(response_lens, dtype=np.int64),
            reward=np.asarray(reward, dtype=SCALAR_DTYPES["reward"]),
            group_id=np.asarray(group_id, dtype=SCALAR_DTYPES["group_id"]),
            run_id=np.zeros(n, np.int32) if run_id is None else np.asarray(run_id, np.int32),
            policy_version=version,
            policy_version_last=(
                version.copy()
                if policy_version_last is None
                else np.asarray(policy_version_last, dtype=np.int64)
            ),
            meta_bytes=meta_bytes,
            meta_lens=meta_lens,
            metrics=metrics,
        )
        cols.validate()
        return cols

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> TrajectoryColumns:
        """Columns of ``trajectories`` via ``Trajectory.to_record``."""
        if not trajectories:
            raise PoolDataError("trajectories: nothing to append (empty list)")
        recs = [t.to_record() for t in trajectories]
        names = sorted({k for t in trajectories for k in t.metrics})
        metrics = {
            k: np.array([t.metrics.get(k, math.nan) for t in trajectories], np.float32)
            for k in names
        }

        def flat(name: str, dtype: np.dtype) -> np.ndarray:
            return np.concatenate([r["ragged"][name] for r in recs]).astype(dtype, copy=False)

        def scalar(name: str) -> np.ndarray:
            return np.array([r["scalars"][name] for r in recs], dtype=SCALAR_DTYPES[name])

        return cls.from_arrays(
            prompt_ids=flat("prompt_ids", PROMPT_DTYPE),
            prompt_lens=np.array([len(r["ragged"]["prompt_ids"]) for r in recs]),
            response_ids=flat("response_ids", RESPONSE_DTYPES["response_ids"]),
            loss_mask=flat("loss_mask", RESPONSE_DTYPES["loss_mask"]),
            logprobs=flat("logprobs", RESPONSE_DTYPES["logprobs"]),
            response_lens=np.array([len(r["ragged"]["response_ids"]) for r in recs]),
            reward=scalar("reward"),
            group_id=scalar("group_id"),
            run_id=scalar("run_id"),
            policy_version=scalar("policy_version"),
            policy_version_last=scalar("policy_version_last"),
            metrics=metrics,
            meta=[r["meta"] for r in recs],
        )

    # -- checks ------------------------------------------------------------
    def validate(self) -> None:
        """Vectorised form of ``Trajectory.validate``; raises ``PoolDataError``."""
        n = len(self)
        for name in (
            "response_lens",
            "reward",
            "group_id",
            "run_id",
            "policy_version",
            "policy_version_last",
            "meta_lens",
        ):
            if len(getattr(self, name)) != n:
                raise PoolDataError(
                    f"{name}: {len(getattr(self, name))} values for {n} trajectories"
                )
        for name, arr in self.metrics.items():
            if len(arr) != n:
                raise PoolDataError(f"metrics[{name!r}]: {len(arr)} values for {n} trajectories")
        if n and (self.policy_version_last < self.policy_version).any():
            raise PoolDataError("policy_version_last: older than policy_version")
        if n and (self.prompt_lens.min() < 1 or self.response_lens.min() < 1):
            raise PoolDataError("prompt_ids/response_ids: every trajectory needs >= 1 token")
        if int(self.prompt_lens.sum()) != len(self.prompt_ids):
            raise PoolDataError("prompt_ids: flat length != sum(prompt_lens)")
        total = int(self.response_lens.sum())
        for name in RESPONSE_DTYPES:
            if len(getattr(self, name)) != total:
                raise PoolDataError(f"{name}: flat length != sum(response_lens)")
        if int(self.meta_lens.sum()) != len(self.meta_bytes):
            raise PoolDataError("meta: flat length != sum(meta_lens)")
        if self.loss_mask.size and (self.loss_mask.min() < 0 or self.loss_mask.max() > 1):
            raise PoolDataError("loss_mask: values must be 0 or 1")
        if not np.isfinite(self.reward).all():
            raise PoolDataError("reward: must be finite")
        lp = self.logprobs
        if lp.size and (not np.isfinite(lp).all() or lp.max() > 1e-4):
            raise PoolDataError("logprobs: must be finite log-probabilities (<= 0)")
        for name in ("prompt_ids", "response_ids"):
            arr = getattr(self, name)
            if arr.size and arr.min() < 0:
                raise PoolDataError(f"{name}: token ids must be non-negative")

    # -- derived -----------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Raw payload size in bytes (what a plain dump of the arrays would take)."""
        arrays = [getattr(self, f) for f in self.__dataclass_fields__ if f != "metrics"]
        return sum(a.nbytes for a in arrays) + sum(a.nbytes for a in self.metrics.values())

    def meta(self, i: int) -> str:
        off = offsets_of(self.meta_lens)
        return self.meta_bytes[off[i] : off[i + 1]].tobytes().decode()

    def record(
        self, i: int, poff: np.ndarray, roff: np.ndarray, moff: np.ndarray
    ) -> dict[str, Any]:
        rs = slice(roff[i], roff[i + 1])
        return {
            "ragged": {
                "prompt_ids": self.prompt_ids[poff[i] : poff[i + 1]],
                "response_ids": self.response_ids[rs],
                "loss_mask": self.loss_mask[rs],
                "logprobs": self.logprobs[rs],
            },
            "scalars": {k: getattr(self, k)[i] for k in SCALAR_DTYPES},
            "meta": self.meta_bytes[moff[i] : moff[i + 1]].tobytes().decode(),
        }

    def to_trajectories(self) -> list[Trajectory]:
        """``Trajectory`` objects via ``Trajectory.from_record``."""
        from nexrl.core.types.trajectory import Trajectory

        poff, roff = offsets_of(self.prompt_lens), offsets_of(self.response_lens)
        moff = offsets_of(self.meta_lens)
        return [Trajectory.from_record(self.record(i, poff, roff, moff)) for i in range(len(self))]

    def take(self, order: np.ndarray) -> TrajectoryColumns:
        """The trajectories at positions ``order`` (a permutation or selection), in that order."""
        order = np.asarray(order, dtype=np.int64)
        poff, roff = offsets_of(self.prompt_lens), offsets_of(self.response_lens)
        moff = offsets_of(self.meta_lens)
        pidx = ranges_index(poff[:-1][order], self.prompt_lens[order])
        ridx = ranges_index(roff[:-1][order], self.response_lens[order])
        midx = ranges_index(moff[:-1][order], self.meta_lens[order])
        return TrajectoryColumns(
            prompt_ids=self.prompt_ids[pidx],
            prompt_lens=self.prompt_lens[order],
            response_ids=self.response_ids[ridx],
            loss_mask=self.loss_mask[ridx],
            logprobs=self.logprobs[ridx],
            response_lens=self.response_lens[order],
            reward=self.reward[order],
            group_id=self.group_id[order],
            run_id=self.run_id[order],
            policy_version=self.policy_version[order],
            policy_version_last=self.policy_version_last[order],
            meta_bytes=self.meta_bytes[midx],
            meta_lens=self.meta_lens[order],
            metrics={k: v[order] for k, v in self.metrics.items()},
        )

    @staticmethod
    def concat(blocks: Sequence[TrajectoryColumns]) -> TrajectoryColumns:
        """Concatenate blocks in order (metrics missing in a block become NaN)."""
        names = sorted({k for b in blocks for k in b.metrics})
        fields = [f for f in TrajectoryColumns.__dataclass_fields__ if f != "metrics"]
        out = {f: np.concatenate([getattr(b, f) for b in blocks]) for f in fields}
        metrics = {
            k: np.concatenate(
                [b.metrics.get(k, np.full(len(b), np.nan, np.float32)) for b in blocks]
            )
            for k in names
        }
        return TrajectoryColumns(**out, metrics=metrics)


_EMPTY_META = json.dumps({"metrics": {}, "extra_info": {}, "data_item": {}}).encode()


def _meta_json(metrics: dict[str, np.ndarray], i: int) -> str:
    row = {k: float(v[i]) for k, v in metrics.items() if not math.isnan(float(v[i]))}
    return json.dumps({"metrics": row, "extra_info": {}, "data_item": {}})
