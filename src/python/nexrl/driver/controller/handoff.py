"""``weight.handoff`` at the controller: which way new weights reach inference.

``start_handoff`` (once, when the run is built) decides: ``files`` always publishes
and reloads snapshots; ``memory`` and ``auto`` turn the trainer's channel on
(``nexrl.trainer.handoff``) when the server can take it: the embedded engine
started by nexrl or named by ``base_urls``, or vLLM (its ``/update_weights`` with
nexrl's ``nexrl_shm`` engine), a self-hosted trainer, no LoRA; ``auto`` also needs
every replica on trainer rank 0's host (hostnames; vLLM: its handshake answered)
and, for a trainer on a GPU, on its CUDA device (UUIDs). ``WeightHandoff.sync`` (each step that
published) has inference copy the step's weights from the channel, and after a
failed copy warns once, turns the trainer's channel off (which waits for the
step's snapshot to be on disk) and reloads that snapshot: files from then on, no
step lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nexrl.trainer.rank_calls import RankCall

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig
    from nexrl.inference.supervisor import InferenceSupervisor
    from nexrl.trainer.handle import TrainerHandle
    from nexrl.trainer.result import StepResult

__all__ = ["WeightHandoff", "start_handoff"]

logger = logging.getLogger(__name__)
#: Engines that copy weights from the trainer's channel: the embedded server, and vLLM
#: through its own weight-transfer API with nexrl's engine (``backends.inference.adapters``).
MEMORY_BACKENDS = ("embedded", "vllm")


@dataclass
class WeightHandoff:
    """The run's way (``memory``: the channel is on), and why."""

    memory: bool
    why: str

    def sync(
        self, supervisor: InferenceSupervisor, trainer: TrainerHandle, result: StepResult
    ) -> tuple[float, bool]:
        """Inference onto ``result``'s version: ``(seconds, True when in memory)``."""
        version = result.policy_version
        path = str(result.snapshot_path)
        if self.memory and result.handoff is not None:
            try:
                return supervisor.reload_from_channel(result.handoff, version, path), True
            except Exception as exc:
                self.fall_back(trainer, f"inference could not take v{version} from memory: {exc}")
        return supervisor.reload(path, version), False

    def fall_back(self, trainer: TrainerHandle, why: str) -> None:
        """One warning, the trainer back to snapshots (its last one written), files on."""
        logger.warning("weight handoff: %s; snapshots (files) from now on", why)
        self.memory, self.why = False, why
        trainer.call(RankCall.DISABLE_WEIGHT_HANDOFF)


def _why_files(cfg: RecipeConfig, supervisor: InferenceSupervisor) -> str | None:
    """Why this run cannot hand weights over in memory at all (None: it may)."""
    from nexrl.trainer.lora import lora_enabled

    inference = cfg.service.inference_service
    if cfg.trainer.mode != "self-hosted":
        return f"trainer.mode is {cfg.trainer.mode}"
    if inference.backend not in MEMORY_BACKENDS:
        return f"the {inference.backend} engine loads snapshots (files)"
    if inference.backend == "embedded" and inference.command:
        return f"the inference engine is {inference.command}, not the embedded server"
    if lora_enabled(cfg.trainer):
        return "trainer.lora: snapshots are LoRA adapters"
    if not supervisor.base_urls:
        return "no inference replica"
    return None


def _elsewhere(supervisor: InferenceSupervisor, rank0: dict[str, Any]) -> str | None:
    """Why some replica is not where trainer rank 0 is (None: all are)."""
    try:
        replicas = supervisor.channel_identity()
    except Exception as exc:
        return f"cannot ask the server where it runs ({exc})"
    for url, where in replicas.items():
        if where.get("host") != rank0.get("host"):
            return f"{url} runs on {where.get('host')}, trainer rank 0 on {rank0.get('host')}"
        uuid = rank0.get("device_uuid")
        if uuid is not None and where.get("device_uuid") != uuid:
            return f"{url} runs on CUDA device {where.get('device_uuid')}, trainer rank 0 on {uuid}"
    return None


def start_handoff(
    cfg: RecipeConfig,
    trainer: TrainerHandle,
    supervisor: InferenceSupervisor,
    rank0: dict[str, Any],
) -> WeightHandoff:
    """The run's handoff (module doc); logs the choice once."""
    setting = cfg.weight.handoff
    if setting == "files":
        return WeightHandoff(False, "weight.handoff: files")
    why = _why_files(cfg, supervisor)
    if why is None and setting == "auto":
        why = _elsewhere(supervisor, rank0)
    if why is not None:
        log = logger.warning if setting == "memory" else logger.info
        log("weight handoff: files (weight.handoff: %s, but %s)", setting, why)
        return WeightHandoff(False, why)
    try:
        info = trainer.call(RankCall.ENABLE_WEIGHT_HANDOFF)[0]
    except Exception as exc:
        logger.warning("weight handoff: files (the trainer cannot hand over in memory: %s)", exc)
        return WeightHandoff(False, str(exc))
    logger.info(
        "weight handoff: in memory (%s on %s); snapshots written behind each step",
        info.get("transport"),
        info.get("host"),
    )
    return WeightHandoff(True, f"weight.handoff: {setting}")
