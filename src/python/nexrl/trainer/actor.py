"""Trainer ranks as Dask actors, and ``TrainerGroup``, which drives them together.

One ``TrainerActor`` (``nexrl.trainer.rank_actor``) per GPU (on CPU machines a
LocalCluster offers the same ``GPU`` resource name)::

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
the same global batch (a ``BatchRef`` to the pool's rows, a ``Batch``, or a path
written by ``save_batch``) to
every rank; each trains on its shard and rank 0 publishes snapshots. When one
rank fails, the others are given a short grace period, then the group raises
``TrainerGroupError`` naming the rank (a rank stuck in a collective gives up
after ``spec.dist_timeout_s``). ``TrainerGroup`` is a ``TrainerHandle``
(``nexrl.trainer.handle``); ``start`` returns a ``PendingCall`` (``nexrl.trainer.pending``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any
from urllib.parse import urlparse

from nexrl.core.util.dask_workers import workers_of
from nexrl.core.util.net import free_port
from nexrl.trainer.errors import TrainerGroupError, TrainerLostError, TrainerSilentError
from nexrl.trainer.handle import RankZeroCalls
from nexrl.trainer.heartbeats import Heartbeats, raise_if_silent
from nexrl.trainer.pending import PendingCall
from nexrl.trainer.rank_actor import RankInfo, TrainerActor
from nexrl.trainer.rank_calls import RankCall
from nexrl.trainer.spec import TrainerSpec

# TrainerActor, RankInfo, PendingCall and the errors are re-exported: callers import
# them from here.
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

logger = logging.getLogger(__name__)
RENDEZVOUS_TRIES = 3  # builds of the process group when its port was taken (EADDRINUSE)


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


class TrainerGroup(RankZeroCalls):
    """``world_size`` trainer actors driven together (see the module doc); a
    ``TrainerHandle``."""

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
        self.heartbeats: Heartbeats | None = (
            Heartbeats(client, self.workers, silent_s) if self.workers else None
        )

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
        sent no heartbeat for that long (0 = only the call's deadline). The rendezvous
        port is free when rank 0's worker picks it, but another process may take it
        before the process group binds it (EADDRINUSE, seen in CI with runs side by
        side): the group is then built again on a new port, up to
        ``RENDEZVOUS_TRIES`` times in all."""
        world = int(world_size or spec.trainer.world_size)
        addrs = list(workers) if workers else pick_workers(client, world, gpus_per_rank)
        if len(set(addrs)) != world:
            raise TrainerGroupError(f"need {world} distinct workers, got {addrs}")
        for attempt in range(1, RENDEZVOUS_TRIES + 1):
            try:
                return cls._create(client, spec, addrs, gpus_per_rank, timeout_s, silent_s)
            except TrainerGroupError as exc:
                if "EADDRINUSE" not in str(exc) or attempt == RENDEZVOUS_TRIES:
                    raise
                logger.warning("trainer rendezvous port taken (%s); again on a new port", exc)
        raise AssertionError("unreachable")

    @classmethod
    def _create(
        cls,
        client: Any,
        spec: TrainerSpec,
        addrs: list[str],
        gpus_per_rank: float,
        timeout_s: float,
        silent_s: float,
    ) -> TrainerGroup:
        world = len(addrs)
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
            group.call(RankCall.SETUP)
        except BaseException:
            group.close()  # leave no half-joined process group behind on those workers
            raise
        return group

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def call(
        self, method: RankCall, *args: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> list[Any]:
        """Call ``method`` on every rank concurrently; the per-rank results in rank order."""
        return self.start(method, *args, timeout_s=timeout_s, **kwargs).result()

    def start(
        self, method: RankCall, *args: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> PendingCall[Any]:
        """Start ``method`` on every rank and return at once (``PendingCall.done()`` /
        ``.result()``), so a controller can keep working while the ranks run."""
        method = RankCall.named(method)  # a name outside the table fails before sending
        pending = []
        for rank, actor in enumerate(self.actors):
            try:
                pending.append(getattr(actor, method.value)(*args, **kwargs))
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

    # -- the named calls (rank 0's answer) are RankZeroCalls' ----------------------
    def full_state_dict(self) -> dict[str, Any] | None:
        state: dict[str, Any] | None = self.call(RankCall.FULL_STATE_DICT)[0]
        return state

    def close(self) -> None:
        """Tear down the trainers and process groups, then release the actors. With a
        rank's worker gone, the others may be stuck in a collective with it until
        ``dist_timeout_s``: their actors are released without it."""
        try:
            status = str(getattr(self.client, "status", "running"))
            if status != "running":  # the scheduler is gone: a call waits out the reconnect
                raise TrainerGroupError(
                    f"the Dask client is {status} (its scheduler lost): the trainer actors "
                    "went with their workers"
                )
            gone = self.heartbeats.gone() if self.heartbeats is not None else []
            if gone:
                raise TrainerLostError(
                    f"rank(s) {', '.join(map(str, gone))} left the scheduler; not waiting "
                    "for the other ranks to leave the process group",
                    tuple(gone),
                )
            self.call(RankCall.CLOSE, timeout_s=60.0)
        except TrainerGroupError as exc:  # a rank that never set up (or died)
            logger.warning("closing trainer group: %s", exc)
        finally:
            self.client.cancel(self._futures)
            self._futures = []
            self.actors = []
