"""Commit markers: a block of trajectories exists for readers iff its marker does.

A writer writes its block's data first, then ``_commits/<writer_id>/<seq>.json``
in one atomic step (see ``nexrl.core.pool.kv``). ``seq`` counts 0, 1, 2, ... per
writer, so a reader finds new blocks by probing the next number of each writer
it knows and lists ``_commits/`` only to discover new writers: the cost of a
scan grows with the number of writers, never with the number of trajectories.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from nexrl.core.pool.kv import KVStore
from nexrl.core.pool.layout import COMMITS

__all__ = ["CommitLog", "CommitMarker"]


@dataclass(frozen=True, slots=True)
class CommitMarker:
    """What one append made visible."""

    writer: str
    seq: int
    n: int  # trajectories in the block
    row: int  # first row of the block in the segment
    prompt: tuple[int, int]  # [start, stop) in prompt_ids
    response: tuple[int, int]  # [start, stop) in response_ids / loss_mask / logprobs
    meta: tuple[int, int]
    metrics: tuple[str, ...]  # the segment's metric names so far: values[:, 1 + i] is metrics[i]
    time: float  # wall clock of the commit (writer's clock)
    weight_sync: bool  # a weight sync was in progress when the block was committed
    min_version: int
    max_version: int
    nbytes: int  # raw payload bytes

    def key(self) -> str:
        return f"{COMMITS}/{self.writer}/{self.seq:010d}.json"

    def to_json(self) -> bytes:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return json.dumps(d, separators=(",", ":"), default=_plain).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CommitMarker:
        d = json.loads(raw)
        for k in ("prompt", "response", "meta"):
            d[k] = tuple(d[k])
        d["metrics"] = tuple(d["metrics"])
        return cls(**d)


def _plain(v: Any) -> Any:
    """numpy scalars and other ints for JSON."""
    return v.item() if hasattr(v, "item") else int(v)


class CommitLog:
    """Reads and writes commit markers."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv

    def write(self, marker: CommitMarker, *, fsync: bool = False) -> bool:
        """Publish ``marker``; False if that (writer, seq) was already committed."""
        return self.kv.put(marker.key(), marker.to_json(), exclusive=True, fsync=fsync)

    def writers(self) -> list[str]:
        return self.kv.listdir(COMMITS)

    def read(self, writer: str, seq: int) -> CommitMarker | None:
        raw = self.kv.get(f"{COMMITS}/{writer}/{seq:010d}.json")
        return None if raw is None else CommitMarker.from_json(raw)

    def scan(self, next_seq: dict[str, int]) -> list[CommitMarker]:
        """New markers of every writer, starting at ``next_seq[writer]`` (updated in place)."""
        found: list[CommitMarker] = []
        for writer in self.writers():
            seq = next_seq.setdefault(writer, 0)
            while (m := self.read(writer, seq)) is not None:
                found.append(m)
                seq += 1
            next_seq[writer] = seq
        return found
