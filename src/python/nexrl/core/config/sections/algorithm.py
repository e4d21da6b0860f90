"""``algorithm``: advantage estimator, policy loss and KL, selected by registered name.

A field whose default is ``null`` takes the chosen algorithm's own default
(``nexrl.trainer.algorithms.defaults.resolve_algorithm``): the recipe loader fills it
in, so ``nexrl train RECIPE --print-config`` and the run's ``config.yaml``
show the values in effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import cfg_field


@dataclass
class RolloutCorrectionConfig:
    mode: str = cfg_field(
        "none",
        help="Correct for the mismatch between the inference engine's log-probs (the "
        "pool's) and the trainer's: 'none', 'tis' (truncated importance sampling: weight "
        "min(rho, threshold)) or 'mis' (masked importance sampling: tokens or sequences "
        "with rho > threshold leave the loss). The mismatch metrics (rollout_corr/...) are "
        "logged every step either way.",
    )
    level: str = cfg_field(
        "token",
        help="Importance ratio rho per token (exp(old - rollout)) or per sequence "
        "(exp of the sum over its tokens, on every token of the sequence).",
        choices=("token", "sequence"),
    )
    threshold: float = cfg_field(
        2.0, help="Upper bound of rho: truncation (tis) or mask (mis).", minimum=1.0
    )
    threshold_low: float | None = cfg_field(
        None, help="mis: also mask rho below this (null = no lower bound).", minimum=0.0
    )


@dataclass
class AlgorithmConfig:
    advantage_estimator: str = cfg_field(
        "grpo",
        help="Registered advantage estimator (nexrl.trainer.algorithms.ADVANTAGE_ESTIMATORS), "
        "e.g. grpo, dr_grpo (no std division, constant loss normaliser), rloo, "
        "reinforce_plus_plus, reinforce_plus_plus_baseline; with a value model "
        "(trainer.type: self_hosted_ppo) gae (PPO's GAE) or nstep (n-step TD returns).",
    )
    norm_adv_by_std: bool | None = cfg_field(
        None,
        help="GRPO: divide by the group std; null = the estimator's default (grpo: true, "
        "dr_grpo: false).",
    )
    std_ddof: int = cfg_field(
        1,
        help="Delta degrees of freedom of the group std (1 = unbiased, 0 = population).",
        minimum=0,
    )
    gamma: float = cfg_field(
        1.0, help="Discount for REINFORCE++, GAE and n-step returns.", minimum=0.0
    )
    lam: float = cfg_field(
        1.0,
        help="GAE lambda: 0 = one-step TD (low variance, the critic's bias), 1 = Monte "
        "Carlo returns minus the critic's value (verl's default).",
        minimum=0.0,
    )
    n_step: int = cfg_field(
        8, help="nstep: tokens summed before bootstrapping from the critic's value.", minimum=1
    )
    policy_loss: str = cfg_field(
        "ppo_clip",
        help="Registered policy loss (nexrl.trainer.algorithms.POLICY_LOSSES), e.g. ppo_clip, gspo, "
        "importance_sampling.",
    )
    loss_agg_mode: str | None = cfg_field(
        None,
        help="How token losses become one number (nexrl.trainer.algorithms.LOSS_AGGREGATIONS): "
        "token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm "
        "(Dr.GRPO's constant normaliser, loss_norm_length). null = the advantage "
        "estimator's preset (dr_grpo: seq-mean-token-sum-norm), else the policy loss's "
        "default (ppo_clip, importance_sampling: token-mean; gspo: seq-mean-token-mean).",
    )
    loss_norm_length: float | None = cfg_field(
        None,
        help="The constant C of seq-mean-token-sum-norm (each sequence's token sum / C); "
        "null = rollout_worker.max_response_length.",
        minimum=1.0,
    )
    clip_ratio_low: float | None = cfg_field(
        None,
        help="Clip: lower bound of the ratio is 1 - this; null = the policy loss's default "
        "(ppo_clip: 0.2, gspo: 3e-4).",
        minimum=0.0,
    )
    clip_ratio_high: float | None = cfg_field(
        None,
        help="Clip: upper bound of the ratio is 1 + this; null = the policy loss's default "
        "(ppo_clip: 0.2, gspo: 4e-4; DAPO clip-higher uses 0.28 with ppo_clip).",
        minimum=0.0,
    )
    clip_ratio_c: float | None = cfg_field(
        None,
        help="ppo_clip: dual-clip bound for negative advantages (e.g. 3.0); null = off.",
        minimum=1.0,
    )
    max_ratio: float | None = cfg_field(
        None,
        help="importance_sampling: truncate the importance weight at this; null = the "
        "loss's default (no truncation).",
        minimum=0.0,
    )
    do_old_log_prob_compute: bool = cfg_field(
        True,
        help="Recompute old log-probs with the trainer's weights before the update "
        "(false = use the behaviour log-probs from inference).",
    )
    rollout_correction: RolloutCorrectionConfig = cfg_field(
        default_factory=RolloutCorrectionConfig,
        help="Rollout correction: importance weights for the inference/trainer log-prob "
        "mismatch (TIS, MIS; token or sequence level).",
    )
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
        "filter/short_batch) once it has one. When 8 times this many rounds were filtered "
        "for a command's first step without one informative group (an evaluator that gives "
        "every answer the same reward), the run stops with an error; later steps wait for "
        "one (a line every runtime_monitor.wait_notice_s says so).",
        minimum=1,
    )
