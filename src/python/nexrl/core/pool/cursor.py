"""The consumer cursor: which committed trajectories were already handed out (or dropped).

Per writer the cursor keeps ``done``, the number of leading commits that are
fully handled, plus, for later commits that are handled in part, the handled
indices as ``[start, stop)`` ranges. Groups complete roughly in commit order,
so this stays a handful of numbers per writer however large the pool grows.

Each state is saved as a new *generation* file
``_consumers/<name>/<generation>.json``, created exclusively (a second consumer
racing on the same name gets ``ConsumerConflictError`` instead of silently
double-delivering) and written atomically. ``LATEST`` is only a hint for
finding the newest generation quickly. Older generations stay: they are the
delivery log (which batch step took which trajectory) and the points
``TrajectoryPool.load_state_dict`` can rewind to after a trainer restart.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nexrl.core.errors import NexrlError
from nexrl.core.pool.kv import KVStore
from nexrl.core.pool.layout import CONSUMERS

__all__ = [
    "ConsumerConflictError",
    "Cursor",
    "CursorStore",
    "in_ranges",
    "merge_ranges",
    "ranges_of",
]

Ranges = list[list[int]]


class ConsumerConflictError(RuntimeError, NexrlError):
    """Another process advanced this consumer's cursor (two trainers on one consumer name)."""


def ranges_of(indices: np.ndarray) -> Ranges:
    """Sorted unique ints -> ``[[start, stop), ...]``."""
    idx = np.unique(np.asarray(indices, dtype=np.int64))
    if len(idx) == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(idx)]])
    return [[int(idx[a]), int(idx[b - 1]) + 1] for a, b in zip(starts, stops, strict=True)]


def indices_of(ranges: Ranges) -> np.ndarray:
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def merge_ranges(ranges: Ranges, values: np.ndarray) -> Ranges:
    """``ranges`` plus the ints ``values``, merged into sorted disjoint ``[start, stop)``
    ranges (never expanded: the values may be sparse and large)."""
    spans = sorted([*map(tuple, ranges), *map(tuple, ranges_of(values))])
    out: Ranges = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([int(a), int(b)])
    return out


def in_ranges(ranges: Ranges, values: np.ndarray) -> np.ndarray:
    """Boolean mask: which of ``values`` lie in ``ranges`` (sorted, disjoint)."""
    values = np.asarray(values, dtype=np.int64)
    if not ranges:
        return np.zeros(len(values), dtype=bool)
    r = np.asarray(ranges, dtype=np.int64)
    at = np.searchsorted(r[:, 0], values, side="right") - 1
    return (at >= 0) & (values < r[np.maximum(at, 0), 1])


@dataclass
class WriterProgress:
    done: int = 0  # commits 0..done-1 are fully handled
    partial: dict[int, tuple[int, Ranges]] = field(default_factory=dict)  # seq -> (n, handled)


@dataclass
class Cursor:
    """Handled trajectories, counters, and what the last save delivered."""

    generation: int = 0
    steps: int = 0  # batches delivered so far
    writers: dict[str, WriterProgress] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)  # the event that produced this state
    # group ids delivered or dropped as groups (``PoolConfig.dedup_groups``): a copy of one
    # of them committed again later is a duplicate. Ids go out roughly in order, so this
    # stays a few ranges however many groups the pool holds.
    groups: Ranges = field(default_factory=list)

    def handled(self, writer: str, seq: int) -> np.ndarray | None:
        """Handled indices of a commit; None means the whole commit is done."""
        wp = self.writers.get(writer)
        if wp is None:
            return np.zeros(0, dtype=np.int64)
        if seq < wp.done:
            return None
        return indices_of(wp.partial.get(seq, (0, []))[1])

    def done(self, writer: str) -> int:
        wp = self.writers.get(writer)
        return 0 if wp is None else wp.done

    def mark(self, writer: str, seq: int, indices: np.ndarray, n: int) -> None:
        """Record ``indices`` of commit ``(writer, seq)`` (of ``n`` trajectories) as handled."""
        wp = self.writers.setdefault(writer, WriterProgress())
        if seq < wp.done:
            raise ValueError(f"commit {writer}/{seq} is already fully handled")
        old = indices_of(wp.partial.get(seq, (n, []))[1])
        new = np.asarray(indices, dtype=np.int64)
        if np.intersect1d(old, new).size or (new.size and (new.min() < 0 or new.max() >= n)):
            raise ValueError(f"commit {writer}/{seq}: indices handled twice or out of range")
        wp.partial[seq] = (n, ranges_of(np.concatenate([old, new])))
        while wp.done in wp.partial and wp.partial[wp.done][1] == [[0, wp.partial[wp.done][0]]]:
            del wp.partial[wp.done]
            wp.done += 1

    def bump(self, name: str, k: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + int(k)

    def copy(self) -> Cursor:
        return copy.deepcopy(self)

    # -- json --------------------------------------------------------------
    def to_json(self) -> bytes:
        return json.dumps(
            {
                "generation": self.generation,
                "steps": self.steps,
                "writers": {
                    w: {
                        "done": p.done,
                        "partial": {str(s): [n, r] for s, (n, r) in p.partial.items()},
                    }
                    for w, p in self.writers.items()
                },
                "counters": self.counters,
                "last": self.last,
                **({"groups": self.groups} if self.groups else {}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Cursor:
        d = json.loads(raw)
        writers = {
            w: WriterProgress(p["done"], {int(s): (nr[0], nr[1]) for s, nr in p["partial"].items()})
            for w, p in d["writers"].items()
        }
        return cls(
            d["generation"],
            d["steps"],
            writers,
            d["counters"],
            d.get("last", {}),
            d.get("groups", []),
        )


class CursorStore:
    """Generations of one consumer's cursor under ``_consumers/<name>/``."""

    def __init__(self, kv: KVStore, consumer: str) -> None:
        if not consumer or "/" in consumer or consumer.startswith("."):
            raise ValueError(f"consumer name {consumer!r}: use a plain name like 'trainer'")
        self.kv = kv
        self.prefix = f"{CONSUMERS}/{consumer}"

    def _key(self, gen: int) -> str:
        return f"{self.prefix}/{gen:010d}.json"

    def load(self, generation: int | None = None) -> Cursor:
        """Generation ``generation`` (default: the newest); generation 0 is the empty cursor."""
        gen = self.latest() if generation is None else generation
        if gen == 0:
            return Cursor()
        raw = self.kv.get(self._key(gen))
        if raw is None:
            raise KeyError(f"no cursor generation {gen} in {self.prefix}")
        return Cursor.from_json(raw)

    def latest(self) -> int:
        hint = self.kv.get(f"{self.prefix}/LATEST")
        if hint is not None:
            gen = int(hint)
            if gen == 0 or self.kv.get(self._key(gen)) is not None:
                while self.kv.get(self._key(gen + 1)) is not None:
                    gen += 1
                return gen
        gens = self.generations()
        return gens[-1] if gens else 0

    def generations(self) -> list[int]:
        return sorted(int(n[:-5]) for n in self.kv.listdir(self.prefix) if n.endswith(".json"))

    def events(self) -> list[tuple[int, dict[str, Any]]]:
        """``(generation, last)`` of every saved generation, oldest first (the delivery log)."""
        out = []
        for gen in self.generations():
            raw = self.kv.get(self._key(gen))
            if raw is not None:
                out.append((gen, dict(json.loads(raw)).get("last", {})))
        return out

    def save(self, cursor: Cursor) -> None:
        """Write ``cursor`` as generation ``cursor.generation`` (must not exist yet)."""
        if not self.kv.put(self._key(cursor.generation), cursor.to_json(), exclusive=True):
            raise ConsumerConflictError(
                f"cursor generation {cursor.generation} of '{self.prefix}' already exists: "
                "another process consumes this pool under the same consumer name"
            )
        self.kv.put(f"{self.prefix}/LATEST", str(cursor.generation).encode())
