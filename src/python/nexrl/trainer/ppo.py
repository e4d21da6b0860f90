"""``SelfHostedPpoTrainer`` (``trainer.type: self_hosted_ppo``): PPO with a value model.

The GRPO trainer's step (``nexrl.trainer.grpo``) with a critic
(``nexrl.trainer.critic``) beside the policy::

    prepare_batch (global batch, every rank the same):
        values  = V_phi(s_t) on every response token       (the critic, before its update)
        then the GRPO trainer's steps 1-6 with the advantage estimator given the values:
        (A, R)  = gae(r, mask, values, gamma, lam)         (or nstep(..., n_step); whitened A)
    update:
        the policy: clipped PPO loss on A (``update_policy``)
        the critic: clipped value loss 0.5 * max((V - R)^2, (V_clip - R)^2), token mean
                    (``Critic.update``; trainer.critic.cliprange_value)

Metrics besides the policy's: ``critic/vf_loss``, ``critic/vf_clipfrac``,
``critic/vpred_mean``, ``critic/vf_explained_var``, ``critic/values/{mean,max,min}``,
``critic/returns/{mean,max,min}``, ``critic/grad_norm``, ``critic/lr``. The critic is
checkpointed with the policy and resumed with it (``build_extra_engines``).
"""

from __future__ import annotations

from typing import Any

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS
from nexrl.trainer.algorithms.value import estimator_takes_values
from nexrl.trainer.critic import CHECKPOINT_TAG, Critic
from nexrl.trainer.engine import TrainingEngine
from nexrl.trainer.errors import TrainerError
from nexrl.trainer.grpo import SelfHostedGrpoTrainer
from nexrl.trainer.step_metrics import timed
from nexrl.trainer.update import update_policy

__all__ = ["SelfHostedPpoTrainer"]


class SelfHostedPpoTrainer(SelfHostedGrpoTrainer):
    """PPO with a value model (module doc)."""

    #: This trainer trains a value model (the recipe check asks it of gae / nstep).
    has_critic = True

    critic: Critic

    def build_extra_engines(self) -> dict[str, TrainingEngine]:
        name = self.algo.advantage_estimator
        if not estimator_takes_values(ADVANTAGE_ESTIMATORS.get(name)):
            raise TrainerError(
                f"trainer.type self_hosted_ppo trains a value model that advantage estimator "
                f"{name!r} does not use; set algorithm.advantage_estimator: gae (or nstep), "
                "or trainer.type: self_hosted_grpo"
            )
        self.critic = Critic(
            self.cfg,
            self.spec.model_path,
            total_optimizer_steps=self.schedule_steps * self.cfg.ppo_epochs,
            dist_timeout_s=self.spec.dist_timeout_s,
            packing=self.packing,
        )
        return {CHECKPOINT_TAG: self.critic.engine}

    def prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        timings: dict[str, float] = {}
        if len(batch):
            with timed(timings, "timing/values"):
                batch["values"] = self.critic.compute_values(batch)
        batch, metrics = super().prepare_batch(batch)
        return batch, {**metrics, **timings}

    def _update(self, batch: Batch, units: int) -> dict[str, float]:
        metrics = update_policy(self, batch, units)
        with timed(metrics, "timing/critic_update"):
            metrics.update(self.critic.update(batch))
        return metrics

    def close(self, destroy_process_group: bool = False) -> Any:
        self.critic.close()
        return super().close(destroy_process_group=destroy_process_group)
