"""RL algorithm pieces, resolved by name from a recipe.

Importing this package registers every implementation:

- ``ADVANTAGE_ESTIMATORS``: grpo, dr_grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline,
  and with a value model (:mod:`.value`) gae, nstep
- ``POLICY_LOSSES``: ppo_clip, gspo, importance_sampling
- ``LOSS_AGGREGATIONS``: token-mean, seq-mean-token-sum, seq-mean-token-mean,
  seq-mean-token-sum-norm (:func:`agg_loss`)
- ``ROLLOUT_CORRECTIONS``: tis, mis (:func:`rollout_correction`)
- ``KL_PENALTIES``: kl/k1, abs, mse/k2, low_var_kl/k3
- ``KL_CONTROLLERS``: fixed, adaptive

Each carries its own defaults (:func:`resolve_algorithm` fills a recipe's null
fields from them). The call signatures are documented in
:mod:`nexrl.trainer.algorithms.registry`.
"""

from nexrl.core.pool.filters import zero_variance_group_mask
from nexrl.trainer.algorithms import (
    advantages,
    aggregation,
    correction,
    defaults,
    kl,
    policy_loss,
    value,
)
from nexrl.trainer.algorithms.advantages import group_ids_from_keys, token_level_from_scalar
from nexrl.trainer.algorithms.aggregation import (
    LOSS_AGG_MODES,
    LOSS_AGGREGATIONS,
    LossAggregation,
    agg_loss,
    agg_units,
)
from nexrl.trainer.algorithms.correction import (
    ROLLOUT_CORRECTIONS,
    mismatch_metrics,
    rollout_correction,
)
from nexrl.trainer.algorithms.defaults import resolve_algorithm
from nexrl.trainer.algorithms.kl import AdaptiveKLController, FixedKLController, entropy_from_logits
from nexrl.trainer.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_CONTROLLERS,
    KL_PENALTIES,
    POLICY_LOSSES,
    Registry,
    UnknownNameError,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_CONTROLLERS",
    "KL_PENALTIES",
    "LOSS_AGGREGATIONS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS",
    "AdaptiveKLController",
    "FixedKLController",
    "LossAggregation",
    "Registry",
    "UnknownNameError",
    "advantages",
    "agg_loss",
    "agg_units",
    "aggregation",
    "correction",
    "defaults",
    "entropy_from_logits",
    "group_ids_from_keys",
    "kl",
    "mismatch_metrics",
    "policy_loss",
    "resolve_algorithm",
    "rollout_correction",
    "token_level_from_scalar",
    "value",
    "zero_variance_group_mask",
]
