"""``algorithm``: advantage estimator, policy loss and KL, selected by registered name."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.config.fields import cfg_field


@dataclass
class AlgorithmConfig:
    advantage_estimator: str = cfg_field(
        "grpo",
        help="Registered advantage estimator (nexrl.algorithms.ADVANTAGE_ESTIMATORS), "
        "e.g. grpo, rloo, reinforce_plus_plus.",
    )
    norm_adv_by_std: bool = cfg_field(
        True, help="GRPO: divide by the group std (false = Dr.GRPO, mean-centred only)."
    )
    std_ddof: int = cfg_field(
        1,
        help="Delta degrees of freedom of the group std (1 = unbiased, 0 = population).",
        minimum=0,
    )
    gamma: float = cfg_field(1.0, help="Discount for REINFORCE++ returns.", minimum=0.0)
    policy_loss: str = cfg_field(
        "ppo_clip",
        help="Registered policy loss (nexrl.algorithms.POLICY_LOSSES), e.g. ppo_clip, gspo, "
        "importance_sampling.",
    )
    loss_agg_mode: str = cfg_field(
        "token-mean",
        help="How token losses become one number.",
        choices=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"),
    )
    clip_ratio_low: float = cfg_field(0.2, help="PPO clip: lower bound is 1 - this.", minimum=0.0)
    clip_ratio_high: float = cfg_field(
        0.2, help="PPO clip: upper bound is 1 + this (DAPO clip-higher uses 0.28).", minimum=0.0
    )
    clip_ratio_c: float | None = cfg_field(
        None, help="Dual-clip bound for negative advantages (e.g. 3.0); null = off.", minimum=1.0
    )
    do_old_log_prob_compute: bool = cfg_field(
        True,
        help="Recompute old log-probs with the trainer's weights before the update "
        "(false = use the behaviour log-probs from inference).",
    )
    off_policy_correction: str = cfg_field(
        "none",
        help="Correct for the inference/trainer mismatch: 'none' or 'tis' (truncated "
        "importance sampling with the behaviour log-probs).",
        choices=("none", "tis"),
    )
    tis_max_ratio: float = cfg_field(2.0, help="Truncation of the TIS weight.", minimum=1.0)
    kl_penalty: str = cfg_field(
        "low_var_kl", help="Registered KL penalty (kl, abs, mse, low_var_kl)."
    )
    kl_loss_coef: float = cfg_field(
        0.0, help="Coefficient of the KL loss term (0 = no reference model).", minimum=0.0
    )
    use_kl_in_reward: bool = cfg_field(
        False, help="Subtract the KL penalty from token rewards instead of a loss term."
    )
    kl_controller: str = cfg_field("fixed", help="Registered KL controller: fixed or adaptive.")
    kl_target: float = cfg_field(0.1, help="Adaptive KL controller target.", minimum=0.0)
    kl_horizon: int = cfg_field(10000, help="Adaptive KL controller horizon.", minimum=1)
    entropy_coeff: float = cfg_field(0.0, help="Entropy bonus coefficient.", minimum=0.0)
    filter_zero_variance_groups: bool = cfg_field(
        False,
        help="Dynamic sampling (DAPO): the pool drops groups whose rewards are all equal "
        "(counted as filtered, never trained) and the controller rolls out more groups "
        "until a batch holds batch_size informative trajectories; see "
        "max_extra_sampling_rounds.",
    )
    max_extra_sampling_rounds: int = cfg_field(
        4,
        help="Dynamic sampling: at most this many extra rounds (one round = a batch's "
        "worth of groups) are rolled out to replace filtered groups for one step; then "
        "the step trains on the informative groups it has (a short batch, logged as "
        "filter/short_batch) once it has one.",
        minimum=1,
    )
