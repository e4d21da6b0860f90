"""RL algorithm pieces, resolved by name from a recipe.

Importing this package registers every implementation:

- ``ADVANTAGE_ESTIMATORS``: grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline
- ``POLICY_LOSSES``: ppo_clip, gspo, importance_sampling (aggregated with :func:`agg_loss`)
- ``KL_PENALTIES``: kl/k1, abs, mse/k2, low_var_kl/k3
- ``KL_CONTROLLERS``: fixed, adaptive

The call signatures are documented in :mod:`nexrl.algorithms.registry`.
"""

from nexrl.algorithms import advantages, filters, kl, policy_loss
from nexrl.algorithms.advantages import group_ids_from_keys, token_level_from_scalar
from nexrl.algorithms.filters import zero_variance_group_mask
from nexrl.algorithms.kl import AdaptiveKLController, FixedKLController, entropy_from_logits
from nexrl.algorithms.policy_loss import LOSS_AGG_MODES, agg_loss
from nexrl.algorithms.registry import (
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
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "Registry",
    "UnknownNameError",
    "advantages",
    "agg_loss",
    "entropy_from_logits",
    "filters",
    "group_ids_from_keys",
    "kl",
    "policy_loss",
    "token_level_from_scalar",
    "zero_variance_group_mask",
]
