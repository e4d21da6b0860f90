"""``SelfHostedTrainer``: one data-parallel rank of a trainer on a training engine.

``train_step(batch)`` (every rank gets the same global batch) prepares the batch,
updates the policy on this rank's shard, micro-batch by micro-batch, and
publishes and checkpoints when due: ``nexrl.trainer.step`` has the loop and how
the gradient stays that of the global batch's loss.

The default loss is the policy gradient through the registries
(``nexrl.trainer.loss.policy_gradient_loss``)::

    L = policy_loss(log_pi, old_log_pi, A * w_rollout, mask, loss_agg_mode, ...)
      + beta * agg(kl_penalty(log_pi, ref_log_pi))   if kl_loss_coef > 0 (KL_PENALTIES)
      - entropy_coeff * agg(H(pi))                   if entropy_coeff > 0

with ``self.algo`` the recipe's ``algorithm`` section resolved
(``nexrl.trainer.algorithms.resolve_algorithm``: null fields take the chosen loss's and
estimator's own defaults). ``beta`` is the KL controller's value (``KL_CONTROLLERS``, initialised with
``kl_loss_coef``); with ``use_kl_in_reward`` the KL goes into the rewards
instead (see ``SelfHostedGrpoTrainer``). A reference model (a frozen copy of
the initial model) is loaded when either needs it.

Subclasses override the hooks ``prepare_batch`` (must leave ``advantages`` and
``old_log_probs`` for the default loss), ``compute_loss`` and/or ``forward``
(the micro-batch's response log-probs and entropy). Their old names
(``_prepare_batch``, ...) still work, with a warning (``nexrl.trainer.hooks``).

Where the parts live: the step in ``nexrl.trainer.step``, the micro-batch update
and the global log-probs in ``nexrl.trainer.update``, snapshots, checkpoints and
the resume in ``nexrl.trainer.saving``, the batch's metrics in
``nexrl.trainer.step_metrics``, the algorithm check, seeds and model loading in
``nexrl.trainer.rank_setup``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nexrl.core.types.batch import Batch
from nexrl.core.weights.checkpoint import CheckpointManager
from nexrl.core.weights.snapshot import PublishedSnapshot, SnapshotPublisher
from nexrl.trainer import saving
from nexrl.trainer.algorithms import KL_CONTROLLERS, resolve_algorithm
from nexrl.trainer.algorithms.registry import call_with_options
from nexrl.trainer.batch_io import BatchRef, load_batch
from nexrl.trainer.engine import TrainingEngine, load_backend
from nexrl.trainer.errors import TrainerError
from nexrl.trainer.handoff import TrainerHandoff
from nexrl.trainer.hooks import adopt_old_hook_names
from nexrl.trainer.lora import apply_lora, lora_enabled
from nexrl.trainer.loss import policy_gradient_loss
from nexrl.trainer.ops import disable_dropout, model_inputs, response_log_probs
from nexrl.trainer.packing import packed_response_log_probs, packing_works
from nexrl.trainer.rank_setup import check_algorithm, load_model, seed_everything
from nexrl.trainer.result import StepResult
from nexrl.trainer.schedule import schedule_change_note
from nexrl.trainer.spec import TrainerSpec
from nexrl.trainer.step import run_step
from nexrl.trainer.update import global_log_probs, update_policy

__all__ = ["SelfHostedTrainer", "TrainerError", "call_with_options"]

logger = logging.getLogger(__name__)


class SelfHostedTrainer:
    """A trainer rank (see the module doc); build it with ``nexrl.trainer.create_trainer``."""

    #: Whether this trainer's loss uses a reference model (when the KL settings ask).
    uses_reference_model = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        adopt_old_hook_names(cls)  # a subclass overriding _prepare_batch & co. still works

    def __init__(
        self,
        spec: TrainerSpec,
        *,
        engine: TrainingEngine | None = None,
        model: torch.nn.Module | None = None,
    ) -> None:
        self.spec, self.cfg = spec, spec.trainer
        self.algo = resolve_algorithm(spec.algorithm)
        self.loss_agg_mode: str = self.algo.loss_agg_mode or "token-mean"
        check_algorithm(self.algo)
        seed_everything(spec.seed)
        if model is None:
            model = self._load_model(spec.model_path, torch.float32)
        if self.cfg.disable_dropout:
            zeroed = disable_dropout(model)
            if zeroed:
                logger.info("trainer: %d dropout(s) set to 0 (trainer.disable_dropout)", zeroed)
        self.model_config = model.config
        self.lora = lora_enabled(self.cfg)
        if self.lora:
            model = apply_lora(model, self.cfg)
        if engine is None:
            build = load_backend(self.cfg.backend)
            engine = build(
                model,
                self.cfg,
                total_optimizer_steps=self.schedule_steps * self.cfg.ppo_epochs,
                dist_timeout_s=spec.dist_timeout_s,
            )
        self.engine = engine
        self.rank, self.world_size, self.device = engine.rank, engine.world_size, engine.device
        self.packing = self.cfg.packing and self._packing_works()
        self.global_step = 0  # train_step calls
        self.policy_version = 0  # updates applied (0 = the initial weights)
        self.optimizer_steps = 0
        self.nonfinite_total = 0  # steps whose update was skipped for a NaN/inf loss
        self.nonfinite_streak = 0  # ... in a row, up to now
        # set by step() for the prepare_batch call: old log-probs may come from the
        # update's own forward (``_old_log_probs_from_update``)
        self.defer_old_log_probs = False
        self.extra_state: dict[str, Any] = {}
        self.kl_ctrl = call_with_options(
            KL_CONTROLLERS.get(self.algo.kl_controller),
            self.algo.kl_loss_coef,
            target_kl=self.algo.kl_target,
            horizon=self.algo.kl_horizon,
        )
        self.ref_model = self._load_reference() if self.needs_reference else None
        self.last_snapshot: PublishedSnapshot | None = None
        self.publisher: SnapshotPublisher | None = None
        self.handoff: TrainerHandoff | None = None  # weight.handoff in memory (rank 0)
        if spec.snapshot_dir is not None and self.rank == 0:
            self.publisher = SnapshotPublisher(
                spec.snapshot_dir,
                keep=spec.keep_snapshots,
                tokenizer_dir=spec.tokenizer_path or spec.model_path,
            )
        self.checkpoints = (
            CheckpointManager(spec.checkpoint_dir, keep=spec.keep_checkpoints)
            if spec.checkpoint_dir
            else None
        )
        self.resumed_from: Path | None = None
        self.resume_note: str | None = None  # set on resume when corrupted files were passed over
        self.schedule_note: str | None = None  # set on resume when the schedule's end moved
        # other engines checkpointed with the policy's, by tag (a subclass's value model)
        self.extra_engines: dict[str, TrainingEngine] = self.build_extra_engines()
        saving.resume(self)  # the checkpoint resume.mode picks, if any

    # -- construction -----------------------------------------------------------
    @property
    def schedule_steps(self) -> int:
        """Training steps the LR schedule spans (``trainer.lr_schedule_steps``, else
        ``trainer.total_train_steps``)."""
        return self.cfg.lr_schedule_steps or self.cfg.total_train_steps

    _load_model = staticmethod(load_model)

    def _packing_works(self) -> bool:
        """``trainer.packing`` on: whether the model keeps packed sequences apart
        (``nexrl.trainer.packing.packing_works``); a line when it does not."""
        vocab = int(getattr(self.model_config, "vocab_size", 0) or 0)
        if vocab > 1 and packing_works(self.engine.module, vocab, self.device):
            return True
        if self.rank == 0:
            logger.warning(
                "trainer.packing: %s attends across packed sequences (its attention does not "
                "follow restarting position ids): this run trains padded",
                type(self.engine.module).__name__,
            )
        return False

    @property
    def needs_reference(self) -> bool:
        return self.uses_reference_model and (
            self.algo.kl_loss_coef > 0 or self.algo.use_kl_in_reward
        )

    @property
    def use_kl_loss(self) -> bool:
        return self.needs_reference and not self.algo.use_kl_in_reward

    def _load_reference(self) -> torch.nn.Module:
        dtype = next(self.engine.module.parameters()).dtype
        ref = self._load_model(self.spec.model_path, dtype)
        ref.to(self.device).eval().requires_grad_(False)
        return ref

    # -- state ------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Trainer state saved in checkpoints (the engine saves model/optimizer/scheduler)."""
        return {
            "global_step": self.global_step,
            "policy_version": self.policy_version,
            "optimizer_steps": self.optimizer_steps,
            "nonfinite_total": self.nonfinite_total,
            "nonfinite_streak": self.nonfinite_streak,
            "kl_controller": self.kl_ctrl.state_dict(),
            "trainer_class": f"{type(self).__module__}.{type(self).__qualname__}",
            "lr_schedule_steps": self.schedule_steps,
            "extra": self.extra_state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])
        self.policy_version = int(state["policy_version"])
        self.optimizer_steps = int(state["optimizer_steps"])
        self.nonfinite_total = int(state.get("nonfinite_total", 0))  # absent before they were
        self.nonfinite_streak = int(state.get("nonfinite_streak", 0))
        self.kl_ctrl.load_state_dict(state["kl_controller"])
        self.extra_state = dict(state.get("extra") or {})
        self.schedule_note = schedule_change_note(
            state.get("lr_schedule_steps"), self.schedule_steps, self.global_step, self.cfg
        )

    # -- the step ---------------------------------------------------------------
    def train_step(self, batch: Batch | BatchRef | str | Path) -> dict[str, float]:
        """``step(batch)`` as its metrics row (``StepResult.row``)."""
        return self.step(batch).row()

    def step(self, batch: Batch | BatchRef | str | Path) -> StepResult:
        """One update on the global ``batch`` (a ``Batch``, a ``BatchRef`` or a ``save_batch`` file).

        Collective: every rank calls it with the same batch. Publishes a snapshot
        (or hands the weights over in memory: ``nexrl.trainer.handoff``) every
        ``sync_every`` updates and checkpoints every ``save_every`` steps
        when configured. Returns the step's counters, what it published (the
        snapshot's path on rank 0) and its metrics (the same on every rank).
        """
        return run_step(self, batch)

    # -- hooks (subclasses override these) --------------------------------------------
    def build_extra_engines(self) -> dict[str, TrainingEngine]:
        """Hook: engines besides the policy's that checkpoints save and resume restores
        (tag -> engine), built before the resume; none here (``self_hosted_ppo``: its
        value model's)."""
        return {}

    def prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        """Hook: turn the received global batch into what ``compute_loss`` needs, and
        metrics (identity here)."""
        return batch, {}

    def _old_log_probs_from_update(self) -> bool:
        """Whether this step's ``prepare_batch`` may leave ``old_log_probs`` out for
        ``_update`` to fill from its own forward (False here; see the GRPO trainer)."""
        return False

    def _after_old_log_probs(self, batch: Batch) -> dict[str, float]:
        """Hook: metrics that need the global ``old_log_probs`` when ``_update`` filled
        them (after the update); none here."""
        return {}

    def _update(self, batch: Batch, units: int) -> dict[str, float]:
        return update_policy(self, batch, units)

    def forward(self, mb: Batch, *, entropy_grad: bool | None) -> tuple[Tensor, Tensor | None]:
        """Hook: the response log-probs ``[b, R]`` of a micro-batch (on the device) under
        the policy being trained, and the entropy (None unless ``entropy_grad`` is set:
        True keeps its gradient, False detaches it); packed with ``trainer.packing``
        (``nexrl.trainer.packing``)."""
        if self.packing:
            return packed_response_log_probs(self.engine.forward, mb, entropy_grad=entropy_grad)
        out = self.engine.forward(**model_inputs(mb))
        return response_log_probs(
            out.logits, mb.prompt_width, mb["responses"], entropy_grad=entropy_grad
        )

    def compute_loss(
        self, mb: Batch, log_probs: Tensor, entropy: Tensor | None
    ) -> tuple[Tensor, dict[str, Tensor | float]]:
        """Hook: the loss of a micro-batch (mean over its loss units) and metrics; the
        policy-gradient loss here."""
        if "advantages" not in mb:
            raise TrainerError(
                f"{type(self).__name__}: the batch has no 'advantages'; compute them in "
                "prepare_batch (SelfHostedGrpoTrainer does) or override compute_loss"
            )
        return policy_gradient_loss(
            mb,
            log_probs,
            entropy,
            self.algo,
            kl_coef=float(self.kl_ctrl.value),
            use_kl_loss=self.use_kl_loss,
        )

    # the old names of the hooks (nexrl.trainer.hooks): callers and subclasses may use them
    _prepare_batch = prepare_batch
    _forward = forward
    _compute_loss = compute_loss

    # -- log-probs on the global batch -----------------------------------------------
    def compute_log_probs(self, batch: Batch, *, reference: bool = False) -> Tensor:
        """Log-probs ``[B, R]`` (CPU, float32, 0 on padding) of the responses of the global
        ``batch`` under the current policy (or the reference model).

        Collective: each rank computes its shard, then the shards are all-gathered.
        """
        return global_log_probs(self, batch, reference)

    def validation_loss(self, batch: Batch | str | Path) -> dict[str, float]:
        """``{"nll_sum", "tokens"}``: the negative log-likelihood of ``batch``'s
        ``response_mask`` tokens under the current policy, no update (collective;
        the mean is ``nll_sum / tokens``, summable over several batches)."""
        if not isinstance(batch, Batch):
            batch = load_batch(batch)
        log_probs = self.compute_log_probs(batch)
        mask = batch["response_mask"].float()
        return {"nll_sum": float(-(log_probs * mask).sum()), "tokens": float(mask.sum())}

    def greedy_answers(
        self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int], pad_id: int
    ) -> list[list[int]]:
        """Greedy continuations of ``prompts`` under the current policy, each up to and
        including its first stop token (collective under ZeRO-3: every rank generates
        every prompt; ``nexrl.trainer.generate``)."""
        from nexrl.trainer.generate import greedy_answers

        return greedy_answers(
            self.engine.module,
            prompts,
            max_new_tokens=max_new_tokens,
            stop_ids=stop_ids,
            pad_id=pad_id,
            synced=self.world_size > 1 and self.cfg.zero_stage == 3,
            device=self.device,
        )

    # -- weights ----------------------------------------------------------------
    def full_state_dict(self) -> dict[str, Tensor] | None:
        """Consolidated weights on rank 0 (collective under ZeRO-3)."""
        return self.engine.full_state_dict()

    def publish_snapshot(self) -> PublishedSnapshot | None:
        """Publish snapshot ``v{policy_version}`` (collective; rank 0 writes)."""
        return saving.publish_snapshot(self)

    def save_checkpoint(self, extra_state: dict[str, Any] | None = None) -> Path | None:
        """Checkpoint ``step_{global_step}`` (collective); ``extra_state`` is saved with it."""
        return saving.save_checkpoint(self, extra_state)

    def close(self, destroy_process_group: bool = False) -> None:
        """Free the engine (and leave the process group when asked: actors do)."""
        if self.handoff is not None:  # the last snapshot, written behind, lands first
            self.handoff.close()
            self.handoff = None
        if self.publisher is not None:
            self.publisher.wait()
        self.engine.close(destroy_process_group=destroy_process_group)
