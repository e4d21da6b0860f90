"""``TrajectoryPool``: the trainer/controller side of the pool.

Writers (``PoolWriter``, one per rollout process) add trajectories; the pool
discovers their commits, groups them (``key_list`` / ``group_size``), decides
when a batch is ready (``batch_readiness``), applies the group timeout and the
staleness filter and the group filter (dynamic sampling: ``filter_zero_variance``
drops groups whose rewards are all equal), drops second copies of a group
(``dedup_groups``: a group committed twice is delivered from one commit, and the
batch is filled from the pool instead), and hands each trajectory to its
consumer exactly once: a dropped or filtered trajectory is marked handled in
the cursor (counted, never delivered). The
consumer cursor is saved in the store, atomically, *before* a batch is
returned, so a new ``TrajectoryPool`` on the same store continues where the
last one stopped; ``state_dict``/``load_state_dict`` rewind it to a trainer
checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nexrl.core.errors import NexrlError
from nexrl.core.pool.batch import PoolBatch, PoolStats
from nexrl.core.pool.checks import validate_pool_config
from nexrl.core.pool.commits import CommitLog
from nexrl.core.pool.config import PoolConfig
from nexrl.core.pool.cursor import Cursor, CursorStore, merge_ranges, ranges_of
from nexrl.core.pool.grouping import Group
from nexrl.core.pool.index import PoolIndex
from nexrl.core.pool.kv import open_kv
from nexrl.core.pool.layout import Chunking, ensure_pool
from nexrl.core.pool.writer import WEIGHT_SYNC_KEY, PoolWriter, read_weight_sync

__all__ = ["PoolConfigError", "TrajectoryPool"]


class PoolConfigError(ValueError, NexrlError):
    """The pool configuration is invalid; ``problems`` lists every issue."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class TrajectoryPool:
    """Grouped, exactly-once batches from a zarr trajectory pool (one consumer)."""

    def __init__(self, config: PoolConfig, *, clock: Callable[[], float] = time.time) -> None:
        problems = validate_pool_config(config)
        if "${" in config.store:
            problems.append(f"trajectory_pool.store: unresolved interpolation in {config.store!r}")
        if problems:
            raise PoolConfigError(problems)
        self.config = config
        self.url = config.store
        self.storage_options = dict(config.storage_options) or None
        self.chunking = Chunking(**config.chunking)
        self.kv = open_kv(self.url, self.storage_options)
        ensure_pool(self.kv)
        self.log = CommitLog(self.kv)
        self.cursors = CursorStore(self.kv, config.consumer)
        self._clock = clock
        self._reset(self.cursors.load())

    def _reset(self, cursor: Cursor) -> None:
        """Rebuild the in-memory index from ``cursor`` (opened segments are kept: immutable)."""
        old: PoolIndex | None = getattr(self, "index", None)
        self.cursor = cursor
        self.index = PoolIndex(
            self.url,
            self.storage_options,
            self.log,
            cursor,
            self.config.key_list,
            self.config.group_size,
            segments=None if old is None else old.segments,
            dedup=self.config.dedup_groups,
        )

    # -- writers and control -------------------------------------------------
    def writer(self) -> PoolWriter:
        """A new writer on this pool (rollout processes use ``nexrl.core.pool.get_writer``)."""
        return PoolWriter.from_config(self.config)

    def begin_weight_sync(self, target_version: int | None = None) -> None:
        """Flag a weight sync: trajectories committed until ``end_weight_sync`` are tagged."""
        state = read_weight_sync(self.kv)
        state.update(active=True, target_version=target_version, since=time.time())
        self.kv.put(WEIGHT_SYNC_KEY, json.dumps(state).encode())

    def end_weight_sync(self, version: int) -> None:
        """End the sync; ``version`` becomes the current policy version (for staleness)."""
        state = {"active": False, "version": int(version), "since": time.time()}
        self.kv.put(WEIGHT_SYNC_KEY, json.dumps(state).encode())

    def current_version(self) -> int | None:
        v = read_weight_sync(self.kv).get("version")
        return None if v is None else int(v)

    # -- batches -------------------------------------------------------------
    def refresh(self) -> int:
        """Look for new commits; returns the number of new pending trajectories."""
        return self.index.scan()

    def get_batch(
        self,
        *,
        current_version: int | None = None,
        loaded_batch_finished: bool = False,
        min_trajectories: int | None = None,
    ) -> PoolBatch | None:
        """The next batch if one is ready, else None (never blocks).

        ``current_version``: the trainer's policy version (default: the last
        ``end_weight_sync`` version) for the staleness filter and lag metrics.
        ``loaded_batch_finished``: the controller's word that every rollout of
        the loaded data batch has finished (needed by the policies
        'loaded_batch_finished' and 'both').
        ``min_trajectories`` (policy 'batch_size_reached'): hand out a batch as
        soon as ready groups hold this many trajectories (at most ``batch_size``):
        the controller's short batch once dynamic sampling ran out of rounds.
        """
        cfg = self.config
        policy = cfg.batch_readiness
        version = self.current_version() if current_version is None else current_version
        self.refresh()
        if policy != "batch_size_reached" and not loaded_batch_finished:
            return None
        want = 1 if policy == "loaded_batch_finished" else cfg.batch_size
        if min_trajectories is not None and policy == "batch_size_reached":
            want = max(1, min(int(min_trajectories), cfg.batch_size))
        try:
            self._settle(None if policy != "batch_size_reached" else want, version)
            if self.index.groups.ready_trajectories < want:
                return None
            limit = cfg.batch_size if policy == "batch_size_reached" else None
            groups, _ = self.index.groups.take(limit)
            return self._deliver(groups, version)
        except BaseException:
            # Whatever failed, the in-memory index may be ahead of the durable cursor:
            # rebuild it from the store so nothing is lost or handed out twice.
            self._reset(self.cursors.load())
            raise

    def wait_batch(self, timeout_s: float, **kwargs: Any) -> PoolBatch | None:
        """``get_batch`` polled every ``poll_interval_s`` until a batch or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            batch = self.get_batch(**kwargs)
            if batch is not None or time.monotonic() >= deadline:
                return batch
            time.sleep(min(self.config.poll_interval_s, max(0.0, deadline - time.monotonic())))

    def _settle(self, index_target: int | None, version: int | None) -> None:
        """Index until ``index_target`` ready trajectories (None: all), apply timeout and staleness."""
        cfg, idx = self.config, self.index
        while True:
            while index_target is None or idx.groups.ready_trajectories < index_target:
                need = (
                    None if index_target is None else index_target - idx.groups.ready_trajectories
                )
                if not idx.index_more(need):
                    break
            expired = idx.groups.expire(idx.horizon(self._clock()), cfg.group_timeout_s)
            dropped: list[Group] = []
            for g in expired:
                if cfg.group_timeout_action == "release":
                    idx.groups.release(g)
                else:
                    dropped.append(g)
            stale: list[Group] = []
            if cfg.max_staleness is not None and version is not None:
                stale = idx.groups.purge(self._is_stale(version - cfg.max_staleness))
            filtered = self._screen() if cfg.filter_zero_variance else []
            copies = idx.take_duplicates()
            if dropped or stale or filtered or copies:
                self._save_drops(dropped, stale, filtered, copies)
            if index_target is None or idx.groups.ready_trajectories >= index_target:
                return
            if not idx.has_unindexed:
                return

    def _is_stale(self, oldest_ok: int) -> Callable[[Group], bool]:
        def stale(g: Group) -> bool:
            return int(self.index.column(g.refs, "policy_version").min()) < oldest_ok

        return stale

    def _screen(self) -> list[Group]:
        """Remove and return the ready groups whose rewards are all equal (dynamic
        sampling, ``nexrl.trainer.algorithms.zero_variance_group_mask``), each group judged
        once, all new groups in one vectorized call."""
        fresh = self.index.groups.unscreened()
        if not fresh:
            return []
        import torch

        from nexrl.core.pool.filters import zero_variance_group_mask

        refs = [r for g in fresh for r in g.refs]
        group = np.repeat(np.arange(len(fresh)), [len(g) for g in fresh])
        keep, _ = zero_variance_group_mask(
            torch.from_numpy(self.index.rewards(refs)), torch.from_numpy(group)
        )
        kept = np.zeros(len(fresh), dtype=bool)
        kept[group[keep.numpy()]] = True
        drop = set()
        for g, k in zip(fresh, kept.tolist(), strict=True):
            g.screened = True
            if not k:
                drop.add(id(g))
        return self.index.groups.purge(lambda g: id(g) in drop) if drop else []

    def _mark(
        self, cursor: Cursor, refs: list[int], copies: Sequence[int] = ()
    ) -> dict[str, dict[str, list[list[int]]]]:
        """Mark ``refs`` (whole groups) and ``copies`` (second copies) handled in ``cursor``;
        the group ids of ``refs`` are recorded (``dedup_groups``). Returns the members."""
        if self.config.dedup_groups and refs:
            cursor.groups = merge_ranges(cursor.groups, self.index.column(refs, "group_id"))
        refs = [*refs, *copies]
        members: dict[str, dict[str, list[list[int]]]] = {}
        for (writer, seq), (indices, n) in self.index.by_commit(refs).items():
            cursor.mark(writer, seq, indices, n)
            members.setdefault(writer, {})[str(seq)] = ranges_of(indices)
        return members

    def _save_drops(
        self,
        timed_out: list[Group],
        stale: list[Group],
        filtered: list[Group],
        copies: list[int],
    ) -> None:
        new = self.cursor.copy()
        new.generation = self.cursor.generation + 1
        refs = [r for g in timed_out + stale + filtered for r in g.refs]
        new.bump("timeout_dropped_groups", len(timed_out))
        new.bump("timeout_dropped_trajectories", sum(len(g) for g in timed_out))
        new.bump("stale_dropped_groups", len(stale))
        new.bump("stale_dropped_trajectories", sum(len(g) for g in stale))
        new.bump("filtered_groups", len(filtered))
        new.bump("filtered_trajectories", sum(len(g) for g in filtered))
        if copies:
            gids = self.index.column(copies, "group_id").tolist()
            groups = {(w, s, g) for (w, s, _), g in zip(self.index.ids(copies), gids, strict=True)}
            new.bump("duplicate_dropped_groups", len(groups))
            new.bump("duplicate_dropped_trajectories", len(copies))
        members = self._mark(new, refs, copies)
        new.last = {"event": "drop", "time": time.time(), "members": members}
        self._commit(new, [*refs, *copies])

    def _deliver(self, groups: list[Group], version: int | None) -> PoolBatch:
        refs = [r for g in groups for r in g.refs]
        rows = self.index.address(refs)
        cols = rows.read(self.index.segment)
        group_index = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
        sync = int(self.index.column(refs, "weight_sync").sum())
        new = self.cursor.copy()
        new.generation = self.cursor.generation + 1
        new.steps += 1
        step = new.steps  # 1-based, as the trainer's steps and metrics.jsonl count
        released = sum(g.released for g in groups)
        new.bump("delivered", len(refs))
        new.bump("released_groups", released)
        new.bump("weight_sync_trajectories", sync)
        new.last = {
            "event": "batch",
            "step": step,
            "step_base": 1,  # pools written before this key counted from 0
            "time": time.time(),
            "size": len(refs),
            "current_version": version,
            "members": self._mark(new, refs),
        }
        ids = self.index.ids(refs)
        self._commit(new, refs)
        return PoolBatch(
            cols,
            group_index.astype(np.int32),
            step,
            new.generation,
            version,
            released,
            sync,
            ids,
            rows,
        )

    def _commit(self, new: Cursor, refs: list[int]) -> None:
        self.cursors.save(new)  # durable first (raises ConsumerConflictError on a race)
        self.cursor = new
        self.index.cursor = new
        self.index.forget(refs)

    # -- state -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a trainer checkpoint stores to resume the pool exactly at this point."""
        return {"consumer": self.config.consumer, "generation": self.cursor.generation}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Rewind the consumer to a checkpoint's ``state_dict``: batches handed out after it
        are handed out again (the trainer never trained on them)."""
        if state.get("consumer", self.config.consumer) != self.config.consumer:
            raise ValueError(
                f"pool state is for consumer {state['consumer']!r}, this pool consumes as "
                f"{self.config.consumer!r}"
            )
        gen = int(state["generation"])
        if gen == self.cursor.generation:
            return
        if gen > self.cursors.latest():
            raise ValueError(f"pool state generation {gen} is newer than the pool's cursor")
        old = self.cursors.load(gen)
        new = old.copy()
        new.generation = self.cursor.generation + 1
        new.last = {"event": "rewind", "to": gen, "time": time.time()}
        self.cursors.save(new)
        self._reset(new)

    def stats(self) -> PoolStats:
        self.refresh()
        c, idx = self.cursor.counters, self.index
        handled = sum(
            c.get(k, 0)
            for k in (
                "delivered",
                "timeout_dropped_trajectories",
                "stale_dropped_trajectories",
                "filtered_trajectories",
                "duplicate_dropped_trajectories",
            )
        )
        sync = read_weight_sync(self.kv)
        return PoolStats(
            committed=handled + idx.pending,
            pending=idx.pending,
            ready=idx.groups.ready_trajectories,
            open_groups=idx.groups.open_groups,
            open_trajectories=idx.groups.open_trajectories,
            unindexed=idx.unindexed,
            writers=len(set(self.log.writers())),
            steps=self.cursor.steps,
            generation=self.cursor.generation,
            delivered=c.get("delivered", 0),
            released_groups=c.get("released_groups", 0),
            timeout_dropped_groups=c.get("timeout_dropped_groups", 0),
            timeout_dropped_trajectories=c.get("timeout_dropped_trajectories", 0),
            stale_dropped_groups=c.get("stale_dropped_groups", 0),
            stale_dropped_trajectories=c.get("stale_dropped_trajectories", 0),
            filtered_groups=c.get("filtered_groups", 0),
            filtered_trajectories=c.get("filtered_trajectories", 0),
            duplicate_dropped_groups=c.get("duplicate_dropped_groups", 0),
            duplicate_dropped_trajectories=c.get("duplicate_dropped_trajectories", 0),
            weight_sync=bool(sync.get("active")),
            current_version=None if sync.get("version") is None else int(sync["version"]),
        )

    def to_xarray(self) -> Any:
        """A lazy ``xarray.Dataset`` over every committed trajectory (see ``nexrl.core.pool.view``)."""
        from nexrl.core.pool.view import pool_to_xarray

        return pool_to_xarray(self.url, self.storage_options, self.kv, self.cursors)
