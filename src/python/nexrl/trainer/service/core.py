"""``TrainingCore``: the service's trainer, split into Tinker-shaped primitives.

It wraps one ``SelfHostedTrainer`` rank (world size 1, in this process) and adds
what the fused ``train_step`` does in one go, as separate calls::

    forward_backward(batch, loss, weight)   # gradients of weight * L(batch) accumulate
    forward_backward(batch2, loss, weight2) # ... and add up
    optim_step()                            # apply them (one optimizer step), clear them

Accumulation semantics: ``L(batch)`` is the loss averaged over the batch's loss
units (tokens or sequences: the recipe's ``algorithm.loss_agg_mode``), exactly as
the fused step computes it; the accumulated gradient is the **sum** of
``weight * grad L`` over the calls since the last ``optim_step``. So one fused step
on the concatenation of batches ``A`` and ``B`` (``N = n_A + n_B`` loss units)
equals ``forward_backward(A, weight=n_A/N)``, ``forward_backward(B, weight=n_B/N)``,
``optim_step()`` (with ``ppo_epochs: 1``; GRPO groups must not straddle the two
batches, since advantages are computed per call).

DeepSpeed boundaries: the fused step marks the last micro-batch as the gradient
accumulation boundary. Here the number of calls is not known ahead, so every
micro-batch of ``forward_backward`` runs off-boundary and ``optim_step`` first
runs one boundary backward of a zero loss (a one-token forward times 0: adds
exact zeros), then ``engine.step()``. The fused path is untouched.

Losses by name: ``cross_entropy`` (negative log-likelihood of the
``response_mask`` tokens), or a policy loss registered in
``nexrl.trainer.algorithms.POLICY_LOSSES`` (``ppo_clip``, ``gspo``, ...). A policy loss
uses the batch's ``advantages`` when given; otherwise the trainer's own
``prepare_batch`` computes them (GRPO: from ``rewards`` and ``group_ids``). The
recipe's own ``algorithm.policy_loss`` goes through the trainer's
``compute_loss`` (a custom trainer's override included).

KL controller: each ``forward_backward`` of a policy loss records the batch's KL
(``actor/reward_kl`` with KL in the reward, else ``actor/kl_loss``); an applied
``optim_step`` feeds their ``weight``-weighted mean and the calls' row count to
the recipe's ``algorithm.kl_controller``, as the fused step does with its batch's
(an adaptive controller moves the coefficient the next calls use).

A ``forward_backward`` that fails half-way (after some micro-batches' backward)
poisons the accumulation: the next ``optim_step`` applies nothing and clears it.
Every method takes the core's lock: calls run one at a time.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from nexrl.core.errors import NexrlError
from nexrl.core.types.batch import Batch
from nexrl.trainer.base import SelfHostedTrainer
from nexrl.trainer.batch_io import BatchRef

__all__ = ["CROSS_ENTROPY", "TrainingCore", "TrainingServiceError", "loss_names"]

CROSS_ENTROPY = "cross_entropy"


class TrainingServiceError(ValueError, NexrlError):
    """A request the service cannot run as asked (``status``: the HTTP status to answer,
    ``field``: the request field at fault)."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.field = status, field


def loss_names() -> list[str]:
    """The loss names ``forward_backward`` accepts."""
    from nexrl.trainer.algorithms import POLICY_LOSSES

    return [CROSS_ENTROPY, *POLICY_LOSSES.names()]


class TrainingCore:
    """One trainer rank behind the service's endpoints (see the module doc)."""

    def __init__(self, trainer: SelfHostedTrainer) -> None:
        if trainer.world_size != 1:
            raise TrainingServiceError(
                f"trainer.world_size={trainer.world_size}: the training service runs one "
                "trainer rank; set trainer.world_size=1"
            )
        self.trainer = trainer
        self.lock = threading.Lock()
        self._calls = 0  # forward_backward calls accumulated since the last optim_step
        self._finite = True
        self._loss_sum = 0.0
        self._kl: list[tuple[float, float, int]] = []  # (kl, weight, rows) per call

    # -- info -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        t = self.trainer
        return {
            "trainer_class": f"{type(t).__module__}.{type(t).__qualname__}",
            "model_path": t.spec.model_path,
            "global_step": t.global_step,
            "policy_version": t.policy_version,
            "optimizer_steps": t.optimizer_steps,
            "pending_forward_backward": self._calls,
            "loss_agg_mode": t.loss_agg_mode,
            "recipe_policy_loss": t.algo.policy_loss,
            "losses": loss_names(),
            "resumed_from": str(t.resumed_from) if t.resumed_from else None,
            "resume_note": t.resume_note,
            "schedule_note": t.schedule_note,
            "snapshot_dir": t.spec.snapshot_dir,
            "checkpoint_dir": t.spec.checkpoint_dir,
        }

    # -- the split step ---------------------------------------------------------------
    def forward_backward(self, batch: Batch, loss: str, weight: float = 1.0) -> dict[str, Any]:
        """Accumulate ``weight * grad L(batch)``; the loss and metrics (module doc)."""
        from nexrl.trainer.ops import loss_units, micro_batches

        if loss not in loss_names():
            raise TrainingServiceError(
                f"loss: unknown loss {loss!r}; use one of {', '.join(loss_names())}",
                field="loss",
            )
        if not math.isfinite(weight):
            raise TrainingServiceError(f"weight: {weight} is not finite", field="weight")
        with self.lock:
            t = self.trainer
            start = time.perf_counter()
            metrics: dict[str, float] = {}
            if loss != CROSS_ENTROPY and "advantages" not in batch:
                batch, prepared = t.prepare_batch(batch)
                metrics.update(prepared)
            units = loss_units(batch, t.loss_agg_mode) if len(batch) else 0
            if units == 0:
                raise TrainingServiceError(
                    "data: no trainable tokens (every loss_mask is 0, or GRPO dropped every "
                    "group for equal rewards)",
                    field="data",
                )
            sums: dict[str, float] = {}
            total = 0.0
            t.engine.train(True)
            try:
                for mb in micro_batches(batch, t.cfg.micro_batch_size):
                    t.engine.set_boundary(False)
                    mb = mb.to(t.device)
                    log_probs, entropy = t.forward(mb, entropy_grad=t.algo.entropy_coeff > 0)
                    value, m = self._loss(loss, mb, log_probs, entropy)
                    self._finite = self._finite and bool(torch.isfinite(value.detach()).all())
                    share = loss_units(mb, t.loss_agg_mode) / units
                    t.engine.backward(value * (share * weight))
                    total += float(value.detach()) * share
                    for k, v in m.items():
                        sums[k] = sums.get(k, 0.0) + float(v) * share
            except BaseException:
                # Part of this call's gradients may be accumulated: the next optim_step
                # drops them all (applied: false) rather than apply half a batch.
                self._finite, self._calls = False, self._calls + 1
                raise
            self._calls += 1
            self._loss_sum += total * weight
            metrics.update(sums)
            kl = metrics.get("actor/reward_kl", metrics.get("actor/kl_loss"))
            if kl is not None and math.isfinite(kl):
                self._kl.append((float(kl), weight, len(batch)))
            metrics["loss_units"] = float(units)
            metrics["timing/forward_backward"] = time.perf_counter() - start
            return {"loss": total, "weight": weight, "metrics": metrics}

    def _loss(
        self, name: str, mb: Batch, log_probs: torch.Tensor, entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        from nexrl.trainer.algorithms import agg_loss
        from nexrl.trainer.loss import policy_gradient_loss

        t = self.trainer
        if name == CROSS_ENTROPY:
            mask = mb["response_mask"].bool()
            value = agg_loss(-log_probs, mask, t.loss_agg_mode, norm_length=t.algo.loss_norm_length)
            return value, {"cross_entropy": value.detach()}
        if "old_log_probs" not in mb:  # given advantages, no old log-probs: on-policy
            mb["old_log_probs"] = log_probs.detach()
        if name == t.algo.policy_loss:
            return t.compute_loss(mb, log_probs, entropy)
        return policy_gradient_loss(
            mb,
            log_probs,
            entropy,
            replace(t.algo, policy_loss=name),
            kl_coef=float(t.kl_ctrl.value),
            use_kl_loss=t.use_kl_loss,
        )

    def optim_step(self) -> dict[str, Any]:
        """Apply the accumulated gradients (one optimizer step) and clear them."""
        with self.lock:
            t = self.trainer
            if self._calls == 0:
                raise TrainingServiceError(
                    "optim_step: no gradients accumulated; call forward_backward first",
                    status=409,
                )
            start = time.perf_counter()
            lr = t.engine.lr()
            self._boundary()
            if not self._finite:
                t.engine.discard_gradients()
                norm = math.nan
            else:
                norm = t.engine.step()
            applied = math.isfinite(norm)
            if applied:
                t.optimizer_steps += 1
                t.policy_version += 1
                kl_weight = sum(w for _, w, _ in self._kl)
                if kl_weight > 0:
                    kl = sum(k * w for k, w, _ in self._kl) / kl_weight
                    t.kl_ctrl.update(kl, n_steps=sum(n for _, _, n in self._kl))
            t.global_step += 1
            calls, loss = self._calls, self._loss_sum
            self._calls, self._finite, self._loss_sum, self._kl = 0, True, 0.0, []
            return {
                "applied": applied,
                "global_step": t.global_step,
                "policy_version": t.policy_version,
                "metrics": {
                    "grad_norm": norm,
                    "lr": lr,
                    "loss": loss,
                    "forward_backward_calls": float(calls),
                    "kl_coef": float(t.kl_ctrl.value),
                    "timing/optim_step": time.perf_counter() - start,
                },
            }

    def _boundary(self) -> None:
        """One boundary backward of an exact zero (see the module doc)."""
        t = self.trainer
        t.engine.set_boundary(True)
        ids = torch.zeros((1, 1), dtype=torch.long, device=t.device)
        out = t.engine.forward(input_ids=ids, attention_mask=torch.ones_like(ids))
        t.engine.backward(out.logits.sum() * 0.0)

    # -- the fused step (the controller's training-service mode) ------------------------
    def step(self, batch: Batch | BatchRef | str | Path) -> Any:
        """The self-hosted trainer's own fused ``step`` (identical numerics)."""
        with self.lock:
            self._idle("train_step")
            return self.trainer.step(batch)

    def validation_loss(self, batch: Batch | str | Path) -> dict[str, float]:
        with self.lock:
            return self.trainer.validation_loss(batch)

    def _idle(self, what: str) -> None:
        if self._calls:
            raise TrainingServiceError(
                f"{what}: {self._calls} forward_backward call(s) are accumulated; call "
                "optim_step first",
                status=409,
            )

    # -- weights and state ---------------------------------------------------------------
    def save_weights_for_sampler(self) -> dict[str, Any]:
        """Publish snapshot ``v{policy_version}`` (the same version again: its path)."""
        with self.lock:
            t = self.trainer
            if t.spec.snapshot_dir is None:
                raise TrainingServiceError(
                    "save_weights_for_sampler: the service has no snapshot folder "
                    "(weight.snapshot_dir)",
                    status=409,
                )
            last = t.last_snapshot
            if last is not None and last.version == t.policy_version and last.path.exists():
                return {"path": str(last.path), "version": last.version}
            snap = t.publish_snapshot()
            assert snap is not None
            return {"path": str(snap.path), "version": snap.version}

    def save_state(self, extra_state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Checkpoint ``step_{global_step}`` (weights, optimizer, counters, ``extra_state``)."""
        with self.lock:
            self._idle("save_state")
            t = self.trainer
            if t.checkpoints is None:
                raise TrainingServiceError(
                    "save_state: the service has no checkpoint folder (output_dir)", status=409
                )
            path = t.save_checkpoint(extra_state)
            return {"path": str(path), "global_step": t.global_step}

    def load_state(self, path: str) -> dict[str, Any]:
        """Restore a checkpoint ``save_state`` wrote (weights, optimizer, counters)."""
        from nexrl.core.weights.checkpoint import CheckpointError, CheckpointManager

        with self.lock:
            self._idle("load_state")
            t = self.trainer
            folder = Path(path)
            if not folder.is_dir():
                raise TrainingServiceError(
                    f"path: {path!r} is not a checkpoint folder", status=404, field="path"
                )
            try:
                state = CheckpointManager(folder.parent).load(t.engine, folder)
            except CheckpointError as exc:
                raise TrainingServiceError(f"path: {exc}", field="path") from None
            t.load_state_dict(state)
            t.resumed_from = folder
            return {"path": str(folder), **self.counters()}

    def counters(self) -> dict[str, int]:
        t = self.trainer
        return {"global_step": t.global_step, "policy_version": t.policy_version}

    def extra_state(self) -> dict[str, Any]:
        return dict(self.trainer.extra_state)

    def close(self) -> None:
        with self.lock:
            self.trainer.close(destroy_process_group=True)
