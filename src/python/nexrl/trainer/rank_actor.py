"""One trainer rank as a Dask actor: ``TrainerActor`` (its trainer built on the
worker it is pinned to) and ``RankInfo`` (where it sits in the data-parallel group).

``TrainerGroup`` (``nexrl.trainer.actor``) places one per rank and calls them
together; each method here is one rank's share of a collective call.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from nexrl.core.util.cpu import cpu_threads
from nexrl.core.util.net import interface_of, is_loopback, worker_host
from nexrl.trainer.errors import TrainerGroupError
from nexrl.trainer.result import StepResult
from nexrl.trainer.spec import TrainerSpec

__all__ = ["RankInfo", "TrainerActor"]


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
            _gloo_interface()
        if not torch.cuda.is_available():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
            ranks = self.info.local_world_size if self.info else 1
            torch.set_num_threads(cpu_threads(ranks, self.spec.trainer.cpu_threads))
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
            "address": worker_host(),  # where the other ranks reach this one
            "pid": os.getpid(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "slurm_node": os.environ.get("SLURMD_NODENAME"),
            "global_step": t.global_step if t else None,
            "policy_version": t.policy_version if t else None,
            "resumed_from": str(t.resumed_from) if t and t.resumed_from else None,
            "schedule_note": getattr(t, "schedule_note", None) if t else None,
            "resume_note": getattr(t, "resume_note", None) if t else None,
            # weight.handoff: auto hands over in memory only to a server on this device
            "device_uuid": _device_uuid(t.device) if t else None,
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

    def greedy_answers(
        self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int], pad_id: int
    ) -> list[list[int]]:
        out: list[list[int]] = self._require().greedy_answers(
            prompts, max_new_tokens, stop_ids, pad_id
        )
        return out

    def publish_snapshot(self) -> str | None:
        snap = self._require().publish_snapshot()
        return str(snap.path) if snap is not None else None

    def enable_weight_handoff(self) -> dict[str, Any]:
        """Hand weights over in memory from now on (``nexrl.trainer.handoff.enable``)."""
        from nexrl.trainer import handoff

        return handoff.enable(self._require())

    def disable_weight_handoff(self) -> None:
        """Back to snapshots alone; returns once the last one is on disk."""
        from nexrl.trainer import handoff

        handoff.disable(self._require())

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


def _gloo_interface() -> None:
    """gloo's sockets on the interface of this worker's own address.

    Unless ``GLOO_SOCKET_IFNAME`` is set, gloo binds the address this machine's
    hostname resolves to, else loopback, and tells the other ranks that address. On
    many clusters the hostname resolves to ``127.0.1.1`` (Debian's default) or to an
    interface the other nodes do not reach (as in a network namespace): a rank on
    another node then connects to its own loopback and the group never forms. The
    Dask worker's address is the one the scheduler and the other ranks already reach
    it on (it is ``MASTER_ADDR`` for rank 0), so gloo uses its interface. Left alone
    when the worker listens on loopback (a local run) or ``GLOO_SOCKET_IFNAME`` is set
    (e.g. in ``cluster.slurm.prologue``). NCCL picks its own interface
    (``NCCL_SOCKET_IFNAME``)."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    host = worker_host()
    if not host or is_loopback(host):
        return
    name = interface_of(host)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name


def _device_uuid(device: Any) -> str | None:
    from nexrl.core.weights.handoff.transport import device_uuid

    return device_uuid(device)
