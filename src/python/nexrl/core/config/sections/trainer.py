"""``trainer``: the DeepSpeed trainer actor(s)."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import cfg_field

# Which training backends each built-in trainer type runs on.
TRAINER_BACKENDS: dict[str, tuple[str, ...]] = {
    "self_hosted_grpo": ("deepspeed",),
    "self_hosted_sft": ("deepspeed",),
    "self_hosted_ppo": ("deepspeed",),
}


@dataclass
class LoraConfig:
    """``trainer.lora``: train low-rank adapters (PEFT LoRA) instead of the full model."""

    rank: int = cfg_field(
        0,
        help="LoRA rank r (0 = LoRA off: the full model trains). With r > 0 only the "
        "adapters train and snapshots hold only the adapter.",
        minimum=0,
    )
    alpha: float = cfg_field(
        16.0, help="LoRA alpha; the adapter's update is scaled by alpha / rank.", minimum=0.0
    )
    target_modules: list[str] = cfg_field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        help="Names of the linear modules that get adapters (PEFT target_modules), e.g. "
        "['q_proj', 'v_proj'] or ['all-linear'].",
    )
    dropout: float = cfg_field(0.0, help="Dropout on the adapter's input.", minimum=0.0)
    modules_to_save: list[str] = cfg_field(
        default_factory=list,
        help="Modules trained in full beside the adapters and saved in every snapshot "
        "(PEFT modules_to_save), e.g. ['lm_head'].",
    )


@dataclass
class CriticConfig:
    """``trainer.critic``: the value model ``trainer.type: self_hosted_ppo`` trains beside
    the policy (docs/trainer.md, "PPO with a value model")."""

    model_path: str | None = cfg_field(
        None,
        help="Hugging Face folder the value model starts from (its trunk; a new value head "
        "of one output, zero-initialised, is added); null = the policy's initial model.",
        path=True,
    )
    lr: float | None = cfg_field(
        None,
        help="The value model's learning rate (same schedule and warm-up as the policy's); "
        "null = trainer.lr.",
        minimum=0.0,
    )
    cliprange_value: float = cfg_field(
        0.5,
        help="Value clipping: a prediction moves at most this far from the value it had "
        "before the update before the clipped loss takes over (PPO's value clipping).",
        minimum=0.0,
    )


@dataclass
class TrainerConfig:
    type: str = cfg_field(
        "self_hosted_grpo",
        help="Trainer: self_hosted_grpo (RL without a value model), self_hosted_ppo (RL "
        "with a value model: advantage estimators gae, nstep) or self_hosted_sft "
        "(cross-entropy); a class of your own is a SelfHostedTrainer.",
        registry="trainer type",
    )
    backend: str = cfg_field(
        "deepspeed",
        help="Training engine: deepspeed; one of your own is a build_engine function.",
        registry="training engine",
    )
    mode: str = cfg_field(
        "self-hosted",
        help="Where the trainer runs. 'self-hosted': trainer actors in the run's Dask "
        "cluster, driven by the controller. 'training-service': the controller is a client "
        "of a training service (nexrl.trainer.service: the same trainer behind an HTTP "
        "API shaped like Tinker's); the run starts one on a cluster worker unless "
        "trainer.service_url names a running one. The same recipe trains the same way in "
        "both (docs/training-service.md); RL runs only (mode: rl), trainer.world_size 1.",
        choices=("self-hosted", "training-service"),
    )
    service_url: str | None = cfg_field(
        None,
        help="trainer.mode 'training-service': the URL of an already running service "
        "(nexrl training-service <recipe.yaml>); null = the run starts one. Its "
        "bearer token, if any, comes from the NEXRL_TRAINING_SERVICE_TOKEN environment "
        "variable.",
    )
    custom_trainer: str | None = cfg_field(
        None,
        help="Optional custom trainer class as 'path/to/file.py:ClassName' (or "
        "'package.module:ClassName'), a subclass of SelfHostedTrainer; overrides 'type'.",
    )
    total_train_steps: int = cfg_field(100, help="Optimizer steps to run.", minimum=1)
    save_every: int = cfg_field(
        50, help="Checkpoint every N steps (0 = only at the end).", minimum=0
    )
    keep_checkpoints: int | None = cfg_field(
        3,
        help="Complete checkpoints kept in <output_dir>/checkpoints; older ones are deleted "
        "after each new one is committed (a resume needs only the newest; the two before "
        "it are fallbacks should it be damaged). null = keep every one (each is the "
        "model's weights plus optimizer state: ~3x the weights' size in fp32 Adam).",
        minimum=1,
    )
    world_size: int = cfg_field(1, help="Data-parallel trainer actors (one per GPU).", minimum=1)
    lr: float = cfg_field(1e-6, help="Learning rate.", minimum=0.0)
    weight_decay: float = cfg_field(0.0, help="AdamW weight decay.", minimum=0.0)
    lr_scheduler: str = cfg_field(
        "constant", help="LR schedule.", choices=("constant", "linear", "cosine")
    )
    warmup_steps: int = cfg_field(0, help="Linear warm-up steps.", minimum=0)
    lr_schedule_steps: int | None = cfg_field(
        None,
        help="Training steps the LR schedule spans: the linear/cosine decay reaches 0 here "
        "(null = trainer.total_train_steps). Set it to stop a run early on the recipe's "
        "schedule: total_train_steps=20 lr_schedule_steps=100 trains the first 20 steps of "
        "the 100-step schedule, and resuming with total_train_steps=100 continues it "
        "exactly. The lr of step s depends only on s and the current recipe, so a run "
        "resumed with a different end continues on the new schedule from its step (a "
        "warning says so).",
        minimum=1,
    )
    micro_batch_size: int = cfg_field(
        8,
        help="Sequences per forward/backward on one rank (when "
        "trainer.max_tokens_per_micro_batch is null).",
        minimum=1,
    )
    max_tokens_per_micro_batch: int | None = cfg_field(
        None,
        help="Form micro-batches by tokens instead of rows: each rank's sequences are "
        "binned, longest first, into micro-batches of at most this many real tokens "
        "(prompt + response; a longer sequence gets one of its own), and the ranks run "
        "the same number. The update is that of the whole batch either way. null = "
        "trainer.micro_batch_size rows each.",
        minimum=1,
    )
    packing: bool = cfg_field(
        False,
        help="Forward each micro-batch as one packed row of its real tokens (no padding; "
        "attention kept inside each sequence by restarting position ids) for the policy, "
        "the old and the reference log-probs. Log-probs, entropy and every loss are those "
        "of the padded forward. A model whose attention does not keep packed sequences "
        "apart is found at start and trained padded (one log line).",
    )
    ppo_epochs: int = cfg_field(1, help="Passes over each batch.", minimum=1)
    disable_dropout: bool = cfg_field(
        True,
        help="Train with every dropout of the model at 0 (its config's attention, "
        "residual and embedding dropouts, e.g. GPT-2's 0.1). The policy ratio, the "
        "rollout-correction weights and the old log-probs compare the trainer's "
        "log-probs with the inference server's, which samples without dropout: with it "
        "on they differ at every step. false = keep the model's dropout (e.g. as "
        "regularisation in SFT).",
    )
    grad_clip: float = cfg_field(1.0, help="Gradient norm clip (0 = off).", minimum=0.0)
    max_nonfinite_steps: int = cfg_field(
        3,
        help="A step whose loss or gradient norm is NaN/inf is skipped (no update; counted "
        "in train/skipped_nonfinite); this many such steps in a row stop the run with an "
        "error (1 = stop at the first).",
        minimum=1,
    )
    zero_stage: int = cfg_field(1, help="DeepSpeed ZeRO stage 0-3.", minimum=0)
    offload_optimizer: bool = cfg_field(
        False, help="ZeRO optimizer state offload to CPU (stage >= 1)."
    )
    offload_param: bool = cfg_field(False, help="ZeRO parameter offload to CPU (stage 3).")
    bf16: bool = cfg_field(False, help="bf16 mixed precision (GPU).")
    gradient_checkpointing: bool = cfg_field(False, help="Recompute activations in backward.")
    cpu_threads: int = cfg_field(
        0,
        help="CPU training only: torch threads of each trainer rank. 0 = half the machine's "
        "cores shared among the ranks on it (at least 1), the other half left to the "
        "inference server and rollouts. In weight.sync_mode=sync the server and the trainer "
        "take turns, so a model big enough to use more threads may give the trainer all the "
        "cores: on 2 cores the generation-heavy benchmark's sync step is 1.25x faster with "
        "2 (docs/benchmarks.md); the default tiny model, and one-step-off runs, are slower "
        "with 2.",
        minimum=0,
    )
    lora: LoraConfig = cfg_field(
        default_factory=LoraConfig,
        help="LoRA adapters (off by default); see docs/trainer.md, 'LoRA'.",
    )
    critic: CriticConfig = cfg_field(
        default_factory=CriticConfig,
        help="The value model of trainer.type self_hosted_ppo (unused by other trainers).",
    )
