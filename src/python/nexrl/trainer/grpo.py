"""``SelfHostedGrpoTrainer``: GRPO (and any registered advantage estimator) on grouped batches.

``prepare_batch`` on the global batch (every rank computes the same result)::

    1. filter_zero_variance_groups: drop groups whose rewards are all equal
    2. do_old_log_prob_compute: old_log_probs = log pi_theta(y_t) with the current
       weights (before the update); else the behaviour log-probs stay. Within
       ``step()``, with one PPO epoch and nothing below needing them before the
       update (no rollout correction weights, no KL in the reward), they come from
       the update's own forward instead (the weights move only after the last
       micro-batch: the same values, one forward pass fewer); the mismatch metrics
       of step 6 are then computed after the update
    3. token rewards: r_{i,t} = reward_i on the last valid response token, 0 elsewhere
    4. use_kl_in_reward: r_{i,t} -= beta * kl_penalty(old_log_probs, ref_log_probs)
    5. (A, returns) = ADVANTAGE_ESTIMATORS[advantage_estimator](r, mask, group_ids, run_ids)
       (with the critic's ``values`` when the batch has them: ``self_hosted_ppo``)
    6. rollout correction (``nexrl.trainer.loss.correct_rollout``): the importance
       weights of old_log_probs vs the rollout's behaviour_log_probs
       (``algorithm.rollout_correction``: tis / mis, token / sequence) as
       ``rollout_is_weights``; mis also masks tokens out of response_mask; the
       mismatch metrics (``rollout_corr/...``) every step

The weights of step 6 scale the advantages in the loss: every registered
policy loss is positively homogeneous in the advantage (``L(w A) = w L(A)``
for ``w > 0``, clipping included), so that is the same as scaling each token's
loss, as importance sampling prescribes.
"""

from __future__ import annotations

import time

from nexrl.core.types.batch import Batch
from nexrl.trainer.algorithms import (
    KL_PENALTIES,
    token_level_from_scalar,
    zero_variance_group_mask,
)
from nexrl.trainer.algorithms.calls import call_advantage_estimator
from nexrl.trainer.base import SelfHostedTrainer, TrainerError
from nexrl.trainer.loss import correct_rollout

__all__ = ["SelfHostedGrpoTrainer"]

_NEEDS = ("rewards", "group_ids", "response_mask", "responses", "attention_mask")


class SelfHostedGrpoTrainer(SelfHostedTrainer):
    """Group-relative policy optimisation (see the module doc for ``prepare_batch``)."""

    def prepare_batch(self, batch: Batch) -> tuple[Batch, dict[str, float]]:
        missing = [k for k in _NEEDS if k not in batch]
        if missing:
            raise TrainerError(f"GRPO batch lacks {missing}; build it with Batch.from_trajectories")
        algo, metrics = self.algo, {}
        if algo.filter_zero_variance_groups:
            keep, fm = zero_variance_group_mask(batch["rewards"].float(), batch["group_ids"])
            metrics.update({f"filter/{k}": float(v) for k, v in fm.items()})
            batch = batch[keep]
            if len(batch) == 0:
                return batch, metrics
        deferred = algo.do_old_log_prob_compute and self.defer_old_log_probs
        if deferred:
            batch.tensors.pop("old_log_probs", None)  # _update fills them from its forward
        elif algo.do_old_log_prob_compute:
            start = time.perf_counter()
            batch["old_log_probs"] = self.compute_log_probs(batch)
            metrics["timing/old_log_prob"] = time.perf_counter() - start
        mask = batch["response_mask"].bool()
        rewards = token_level_from_scalar(batch["rewards"].float(), batch["response_mask"])
        if self.needs_reference:
            start = time.perf_counter()
            batch["ref_log_probs"] = self.compute_log_probs(batch, reference=True)
            metrics["timing/ref_log_prob"] = time.perf_counter() - start
        if algo.use_kl_in_reward:
            kl = KL_PENALTIES.get(algo.kl_penalty)(
                batch["old_log_probs"], batch["ref_log_probs"], mask
            )
            rewards = rewards - self.kl_ctrl.value * kl
            metrics["actor/reward_kl"] = float(kl[mask].mean()) if mask.any() else 0.0
        batch["token_level_rewards"] = rewards
        run_ids = batch.tensors.get("run_ids")
        advantages, returns = call_advantage_estimator(
            algo, rewards, mask, batch["group_ids"], run_ids, batch.tensors.get("values")
        )
        batch["returns"] = returns
        if not deferred:
            metrics.update(correct_rollout(batch, algo))
        batch["advantages"] = advantages
        return batch, metrics

    def _old_log_probs_from_update(self) -> bool:
        algo = self.algo
        return (
            algo.do_old_log_prob_compute
            and self.cfg.ppo_epochs == 1
            and algo.rollout_correction.mode == "none"
            and not algo.use_kl_in_reward
            # a subclass's prepare_batch may read old_log_probs after this one's
            and type(self).prepare_batch is SelfHostedGrpoTrainer.prepare_batch
        )

    def _after_old_log_probs(self, batch: Batch) -> dict[str, float]:
        return correct_rollout(batch, self.algo)  # mode none: the mismatch metrics only
