"""``RankCall``: every call a controller makes on a trainer, in one typed table.

A self-hosted trainer (``TrainerGroup``) runs a call on every rank's
``TrainerActor``: the actor's method named by the member's value. A training
service (``ServiceTrainerGroup``) answers the calls marked ``service`` through its
HTTP client (``nexrl.trainer.service.wire`` is that side's table). A call by any
other name fails before anything is sent (``RankCall.named``)::

    trainer.call(RankCall.EXTRA_STATE)[0]        # rank 0's answer
    trainer.start(RankCall.STEP, batch_ref)      # a PendingCall
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nexrl.trainer.errors import TrainerGroupError

__all__ = ["CALLS", "CallInfo", "RankCall"]


class RankCall(StrEnum):
    """A trainer call by name; its value is the ``TrainerActor`` method."""

    SETUP = "setup"
    DESCRIBE = "describe"
    STEP = "step"
    TRAIN_STEP = "train_step"
    VALIDATION_LOSS = "validation_loss"
    GREEDY_ANSWERS = "greedy_answers"
    PUBLISH_SNAPSHOT = "publish_snapshot"
    ENABLE_WEIGHT_HANDOFF = "enable_weight_handoff"
    DISABLE_WEIGHT_HANDOFF = "disable_weight_handoff"
    SAVE_CHECKPOINT = "save_checkpoint"
    FULL_STATE_DICT = "full_state_dict"
    EXTRA_STATE = "extra_state"
    CLOSE = "close"

    @classmethod
    def named(cls, method: str) -> RankCall:
        """The call named ``method``; ``TrainerGroupError`` listing the calls if none."""
        try:
            return cls(method)
        except ValueError:
            names = ", ".join(c.value for c in cls)
            raise TrainerGroupError(f"no trainer call {method!r}; the calls are: {names}") from None


@dataclass(frozen=True)
class CallInfo:
    """What a call takes and what each rank answers."""

    takes: str
    answers: str
    service: bool  # a training service answers it too


CALLS: dict[RankCall, CallInfo] = {
    RankCall.SETUP: CallInfo("nothing", "describe()'s dict", service=False),
    RankCall.DESCRIBE: CallInfo(
        "nothing",
        "rank, host, pid, Slurm job and node, global step, policy version, resume notes",
        service=True,
    ),
    RankCall.STEP: CallInfo(
        "the step's batch (a BatchRef, a save_batch path, or a Batch)", "a StepResult", service=True
    ),
    RankCall.TRAIN_STEP: CallInfo("as step", "step's metrics row", service=True),
    RankCall.VALIDATION_LOSS: CallInfo("a batch", "its loss metrics, no update", service=False),
    RankCall.GREEDY_ANSWERS: CallInfo(
        "prompts (token ids), max new tokens, stop ids, pad id",
        "the greedy answers' token ids",
        service=False,
    ),
    RankCall.PUBLISH_SNAPSHOT: CallInfo("nothing", "the snapshot's path or None", service=True),
    RankCall.ENABLE_WEIGHT_HANDOFF: CallInfo(
        "nothing", "where the in-memory handoff is read from", service=False
    ),
    RankCall.DISABLE_WEIGHT_HANDOFF: CallInfo(
        "nothing", "None, once the last snapshot is on disk", service=False
    ),
    RankCall.SAVE_CHECKPOINT: CallInfo(
        "the controller's extra_state dict (or None)", "the checkpoint's path", service=True
    ),
    RankCall.FULL_STATE_DICT: CallInfo(
        "nothing", "the full weights on CPU (rank 0)", service=False
    ),
    RankCall.EXTRA_STATE: CallInfo(
        "nothing", "the controller's state saved with the resumed checkpoint", service=True
    ),
    RankCall.CLOSE: CallInfo("nothing", "None; the rank leaves its process group", service=False),
}
