"""Trainer ranks as Dask actors, and ``TrainerGroup``, which drives them together.

One ``TrainerActor`` per GPU (on CPU machines a LocalCluster offers the same
``GPU`` resource name)::

    client.submit(TrainerActor, spec, rank_info, actor=True,
                  resources={"GPU": 1}, workers=[addr])

``TrainerGroup.create(client, spec)`` picks ``trainer.world_size`` distinct
workers offering the resource (sorted by host, so ranks on one host get
consecutive local ranks), pins one actor to each, and rendezvous them through
torch.distributed: ``MASTER_ADDR`` is rank 0's host, ``MASTER_PORT`` a free
port found on that host, plus ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE``. Dask holds the resource only while an actor is created,
hence the pinning.

Every trainer method is a collective: the group calls it on all ranks at once
(submit all, then gather) or the ranks deadlock. ``train_step(batch)`` sends
the same global batch (a ``Batch`` or a path written by ``save_batch``) to
every rank; each trains on its shard and rank 0 publishes snapshots. When one
rank fails, the others are given a short grace period, then the group raises
``TrainerGroupError`` naming the rank (a rank stuck in a collective gives up
after ``spec.dist_timeout_s``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from nexrl.errors import NexrlError
from nexrl.trainer.heartbeats import Heartbeats
from nexrl.trainer.result import StepResult
from nexrl.trainer.spec import TrainerSpec
from nexrl.util.cpu import cpu_threads
from nexrl.util.dask_workers import workers_of
from nexrl.util.net import free_port

__all__ = [
    "PendingCall",
    "RankInfo",
    "TrainerActor",
    "TrainerGroup",
    "TrainerGroupError",
    "TrainerLostError",
    "TrainerSilentError",
    "pick_workers",
]

_GRACE_S = 10.0
logger = logging.getLogger(__name__)


class TrainerGroupError(RuntimeError, NexrlError):
    """Trainer actors could not be placed, or a collective call failed on some rank
    (``ranks``: the ranks that failed, when known)."""

    def __init__(self, message: str, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class TrainerLostError(TrainerGroupError):
    """A trainer rank's worker is gone: its process, its job or its node died."""


class TrainerSilentError(TrainerGroupError):
    """A trainer rank's worker sends no heartbeat: stopped or wedged (``Heartbeats``)."""


@dataclass(frozen=True)
class RankInfo:
    """Where one rank sits in the data-parallel group."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    def env(self) -> dict[str, str]:
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


class TrainerActor:
    """One trainer rank living on a Dask worker (see the module doc)."""

    def __init__(self, spec: TrainerSpec, info: RankInfo | None = None) -> None:
        self.spec = spec
        self.info = info
        self.trainer: Any = None

    def setup(self) -> dict[str, Any]:
        """Join the process group and build the trainer (collective)."""
        import torch

        if self.info is not None:
            os.environ.update(self.info.env())
        if not torch.cuda.is_available():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            ranks = self.info.local_world_size if self.info else 1
            torch.set_num_threads(cpu_threads(ranks, int(self.spec.trainer.cpu_threads)))
        from nexrl.trainer.registry import create_trainer

        self.trainer = create_trainer(self.spec)
        return self.describe()

    def _require(self) -> Any:
        if self.trainer is None:
            raise TrainerGroupError("trainer actor used before setup()")
        return self.trainer

    def describe(self) -> dict[str, Any]:
        import torch

        t = self.trainer
        return {
            # torch threads on CPU (trainer.cpu_threads, or the automatic share)
            "cpu_threads": None if torch.cuda.is_available() else torch.get_num_threads(),
            "rank": self.info.rank if self.info else 0,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "global_step": t.global_step if t else None,
            "policy_version": t.policy_version if t else None,
            "resumed_from": str(t.resumed_from) if t and t.resumed_from else None,
            "schedule_note": getattr(t, "schedule_note", None) if t else None,
            "resume_note": getattr(t, "resume_note", None) if t else None,
        }

    def train_step(self, batch: Any) -> dict[str, float]:
        metrics: dict[str, float] = self._require().train_step(batch)
        return metrics

    def step(self, batch: Any) -> StepResult:
        result: StepResult = self._require().step(batch)
        return result

    def validation_loss(self, batch: Any) -> dict[str, float]:
        out: dict[str, float] = self._require().validation_loss(batch)
        return out

    def publish_snapshot(self) -> str | None:
        snap = self._require().publish_snapshot()
        return str(snap.path) if snap is not None else None

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> str | None:
        path = self._require().save_checkpoint(extra_state)
        return str(path) if path is not None else None

    def full_state_dict(self) -> dict[str, Any] | None:
        state = self._require().full_state_dict()
        return None if state is None else {k: v.detach().cpu() for k, v in state.items()}

    def extra_state(self) -> dict[str, Any]:
        """The caller's state saved with the checkpoint this trainer resumed from."""
        return dict(self._require().extra_state)

    def close(self) -> None:
        """Free the trainer and leave the process group, so this worker can host a new one."""
        if self.trainer is not None:
            self.trainer.close(destroy_process_group=True)
            self.trainer = None


def _host(addr: str) -> str:
    return urlparse(addr).hostname or addr


def pick_workers(client: Any, world_size: int, gpus_per_rank: float = 1) -> list[str]:
    """``world_size`` distinct worker addresses offering ``GPU >= gpus_per_rank``."""
    workers = workers_of(client)
    offer = {
        addr: w
        for addr, w in workers.items()
        if w.get("resources", {}).get("GPU", 0) >= gpus_per_rank
    }
    if len(offer) < world_size:
        raise TrainerGroupError(
            f"trainer.world_size={world_size} needs {world_size} Dask workers offering "
            f"resources GPU>={gpus_per_rank}; the cluster has {len(offer)} of {len(workers)} "
            "workers that do (start workers with --resources GPU=1, or lower trainer.world_size)"
        )
    return sorted(offer, key=lambda a: (_host(a), a))[:world_size]


def _failed(fut: Any) -> bool:
    """Whether a (done) actor call raised; an actor future has no status of its own."""
    if not fut.done():
        return False
    try:
        fut.result(timeout=1)
    except Exception:
        return True
    return False


def raise_if_silent(what: str, heartbeats: Heartbeats | None) -> None:
    """``TrainerSilentError`` naming the ranks whose worker has sent no heartbeat for
    ``heartbeats.silent_s`` (``what``: the trainer call, or what the run waited for)."""
    silent = heartbeats.silent() if heartbeats is not None else []
    if not silent or heartbeats is None:
        return
    ranks = ", ".join(f"rank {r} (worker {heartbeats.addrs[r]}) for {s:.0f}s" for r, s in silent)
    raise TrainerSilentError(
        f"trainer {what}: no heartbeat from {ranks}: the process is stopped (SIGSTOP, a "
        f"debugger), swapped out or wedged "
        f"(runtime_monitor.trainer_silent_s={heartbeats.silent_s:g})",
        tuple(r for r, _ in silent),
    )


class PendingCall:
    """A collective call running on every rank (``TrainerGroup.start``).

    ``heartbeats`` (the group's ``Heartbeats``): while waiting, a rank whose worker
    has gone silent ends the wait with ``TrainerSilentError`` instead of the deadline.
    """

    def __init__(
        self,
        method: str,
        futures: list[Any],
        deadline: float,
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self.method = method
        self.futures = futures
        self.deadline = deadline
        self.heartbeats = heartbeats

    def done(self) -> bool:
        return all(f.done() for f in self.futures)

    def check_heartbeats(self) -> None:
        """``TrainerSilentError`` naming the ranks whose worker has gone silent."""
        raise_if_silent(self.method, self.heartbeats)

    def wait(self, timeout_s: float) -> bool:
        """Block until every rank has answered or ``timeout_s`` passed (no sleep past
        the answer: a poll loop wakes as soon as the step is done); whether done.
        Errors are not raised here: ``result()`` raises them; a silent rank is
        (``TrainerSilentError``)."""
        self.check_heartbeats()
        end = time.monotonic() + timeout_s
        for fut in self.futures:
            left = end - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(Exception):
                fut.result(timeout=left)
        return self.done()

    def result(self) -> list[Any]:
        """Per-rank results in rank order; ``TrainerGroupError`` naming the failed ranks
        (the others get a short grace period), a rank still running at the deadline,
        or a rank whose worker went silent (``TrainerSilentError``)."""
        while not self.done() and time.monotonic() < self.deadline:
            if any(_failed(f) for f in self.futures):
                break  # the failed ranks are named below; the others get the grace
            self.wait(min(1.0, max(0.0, self.deadline - time.monotonic())))
        results: list[Any] = []
        errors: list[tuple[int, BaseException]] = []
        for rank, fut in enumerate(self.futures):
            wait = max(1.0, self.deadline - time.monotonic())
            if errors:
                wait = min(wait, _GRACE_S)
            try:
                results.append(fut.result(timeout=wait))
            except Exception as exc:
                errors.append((rank, exc))
                results.append(None)
        if errors:
            rank, first = errors[0]
            ranks = ", ".join(str(r) for r, _ in errors)
            raise TrainerGroupError(
                f"trainer {self.method} failed on rank(s) {ranks}; rank {rank}: "
                f"{type(first).__name__}: {first}",
                tuple(r for r, _ in errors),
            ) from first
        return results


class TrainerGroup:
    """``world_size`` trainer actors driven together (see the module doc)."""

    def __init__(
        self,
        client: Any,
        futures: list[Any],
        actors: list[Any],
        infos: list[RankInfo],
        timeout_s: float,
        workers: list[str] | None = None,
        silent_s: float = 0.0,
    ) -> None:
        self.client = client
        self._futures = futures  # holding them keeps the actors alive
        self.actors = actors
        self.infos = infos
        self.timeout_s = timeout_s
        self.workers = list(workers or [])  # rank r's Dask worker address
        self.heartbeats = Heartbeats(client, self.workers, silent_s) if self.workers else None

    @classmethod
    def create(
        cls,
        client: Any,
        spec: TrainerSpec,
        *,
        world_size: int | None = None,
        gpus_per_rank: float = 1,
        workers: list[str] | None = None,
        timeout_s: float = 900.0,
        silent_s: float = 0.0,
    ) -> TrainerGroup:
        """Place, rendezvous and build the trainers; returns when every rank is ready.
        ``silent_s``: a call ends with ``TrainerSilentError`` once a rank's worker has
        sent no heartbeat for that long (0 = only the call's deadline)."""
        world = int(world_size or spec.trainer.world_size)
        addrs = list(workers) if workers else pick_workers(client, world, gpus_per_rank)
        if len(set(addrs)) != world:
            raise TrainerGroupError(f"need {world} distinct workers, got {addrs}")
        port = client.run(free_port, "", workers=[addrs[0]])[addrs[0]]
        hosts = [_host(a) for a in addrs]
        infos = [
            RankInfo(
                rank=r,
                world_size=world,
                local_rank=hosts[:r].count(hosts[r]),
                local_world_size=hosts.count(hosts[r]),
                master_addr=hosts[0],
                master_port=int(port),
            )
            for r in range(world)
        ]
        tag = uuid.uuid4().hex[:8]
        resources = {"GPU": gpus_per_rank} if gpus_per_rank else None
        futures = [
            client.submit(
                TrainerActor,
                spec,
                info,
                actor=True,
                workers=[addr],
                allow_other_workers=False,
                resources=resources,
                key=f"nexrl-trainer-{tag}-rank{info.rank}",
            )
            for addr, info in zip(addrs, infos, strict=True)
        ]
        try:
            actors = [f.result(timeout=timeout_s) for f in futures]
        except BaseException:
            client.cancel(futures)
            raise
        group = cls(client, futures, actors, infos, timeout_s, addrs, silent_s)
        try:
            group.call("setup")
        except BaseException:
            group.close()  # leave no half-joined process group behind on those workers
            raise
        return group

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def call(
        self, method: str, *args: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> list[Any]:
        """Call ``method`` on every rank concurrently; the per-rank results in rank order."""
        return self.start(method, *args, timeout_s=timeout_s, **kwargs).result()

    def start(
        self, method: str, *args: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> PendingCall:
        """Start ``method`` on every rank and return at once (``PendingCall.done()`` /
        ``.result()``), so a controller can keep working while the ranks run."""
        pending = []
        for rank, actor in enumerate(self.actors):
            try:
                pending.append(getattr(actor, method)(*args, **kwargs))
            except RuntimeError as exc:  # distributed: "Worker holding Actor was lost"
                raise TrainerLostError(
                    f"rank {rank}'s worker is gone (its process, job or node died): {exc}",
                    (rank,),
                ) from exc
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        return PendingCall(method, pending, deadline, self.heartbeats)

    def check_heartbeats(self, what: str) -> None:
        """``TrainerSilentError`` when a rank's worker has gone silent, also between
        calls: a stopped worker holds its rollout tasks too, so the run may be waiting
        for a batch rather than for the trainer."""
        raise_if_silent(what, self.heartbeats)

    # -- convenience wrappers (rank 0's answer) -----------------------------------------
    def setup_info(self) -> list[dict[str, Any]]:
        return self.call("describe")

    def train_step(self, batch: Any) -> dict[str, float]:
        """One step on the global batch (a ``Batch`` or a ``save_batch`` path)."""
        if isinstance(batch, Path):
            batch = str(batch)
        metrics: dict[str, float] = self.call("train_step", batch)[0]
        return metrics

    def step(self, batch: Any) -> StepResult:
        """``train_step`` as rank 0's ``StepResult`` (it holds the snapshot's path)."""
        if isinstance(batch, Path):
            batch = str(batch)
        result: StepResult = self.call("step", batch)[0]
        return result

    def publish_snapshot(self) -> str | None:
        path: str | None = self.call("publish_snapshot")[0]
        return path

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> str | None:
        path: str | None = self.call("save_checkpoint", extra_state)[0]
        return path

    def full_state_dict(self) -> dict[str, Any] | None:
        state: dict[str, Any] | None = self.call("full_state_dict")[0]
        return state

    def close(self) -> None:
        """Tear down the trainers and process groups, then release the actors."""
        try:
            self.call("close", timeout_s=60.0)
        except TrainerGroupError as exc:  # a rank that never set up (or died)
            logger.warning("closing trainer group: %s", exc)
        finally:
            self.client.cancel(self._futures)
            self._futures = []
            self.actors = []
