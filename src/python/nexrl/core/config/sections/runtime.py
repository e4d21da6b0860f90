"""Run-level sections: ``validate``, ``service``, ``logger``, ``runtime_monitor``,
``resource``, ``resume`` and ``model``."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import cfg_field


@dataclass
class ValidateConfig:
    validate_before_train: bool = cfg_field(False, help="Run validation before step 1.")
    every: int = cfg_field(
        0,
        help="Validate every N steps and after the last step, in that step's metrics row "
        "(0 = never).",
        minimum=0,
    )
    data_files: list[str] = cfg_field(
        default_factory=list,
        help="Validation data (as data.data_files: parquet, jsonl, json, patterns); empty = none.",
        path=True,
    )
    temperature: float = cfg_field(0.0, help="Sampling temperature for validation.", minimum=0.0)
    sft_exact_match: bool = cfg_field(
        True,
        help="mode: sft: each validation also generates the last assistant turn of every "
        "held-out conversation greedily with the trainer's weights and logs the share "
        "equal to the reference, token for token, stop token included (val/exact_match).",
    )


# Engines that serve LoRA snapshots as named adapters beside the base model
# (nexrl.inference.lora names the model rollouts request).
ADAPTER_BACKENDS = ("vllm",)


@dataclass
class InferenceServiceConfig:
    backend: str = cfg_field(
        "embedded",
        help="'embedded' (started by nexrl), 'vllm' or 'sglang' (already running at base_urls, "
        "or started by 'command'); one of your own is a nexrl.inference.reload.ReloadAdapter.",
        registry="reload adapter",
    )
    base_urls: list[str] = cfg_field(
        default_factory=list,
        help="OpenAI base URLs of running replicas; empty with 'embedded' = start one.",
    )
    command: str | None = cfg_field(
        None,
        help="A command that starts one OpenAI-compatible replica for nexrl to run "
        "(e.g. 'vllm serve {model} --host {host} --port {port} --served-model-name "
        "{served_model_name}'), with those fields filled in; nexrl starts it (next to "
        "the driver; on Slurm in the inference job), waits for its /health, reloads it "
        "through 'backend''s API and stops it at the end. Needs an empty base_urls.",
    )
    served_model_name: str = cfg_field(
        "policy",
        help="Model name sent in requests; with trainer.lora on vLLM the rollouts request "
        "'<this>-lora', the name the run loads its adapters under (docs/trainer.md).",
    )
    api_key: str = cfg_field(
        "EMPTY",
        help="API key sent to the service (Authorization: Bearer). For a server nexrl starts, "
        "also the bearer token it then requires on every request (/health too; 401 "
        "without it); 'EMPTY' = no token. Required when that server binds beyond loopback "
        "(host, or a Slurm/Kubernetes inference job). Take it from the environment: "
        "${oc.env:NEXRL_TOKEN} (config.yaml keeps the interpolation, not the value).",
    )
    host: str = cfg_field(
        "127.0.0.1",
        help="Address a server nexrl starts here binds: 127.0.0.1 = this machine only; "
        "anything else (0.0.0.0, this node's address) needs api_key. On Slurm/Kubernetes "
        "the server binds its node's address (NEXRL_INFERENCE_HOST overrides).",
    )
    startup_timeout_s: float = cfg_field(
        300.0,
        help="Seconds to wait for the service to answer /health: a server nexrl starts "
        "(at start and at each restart; past it the server is stopped and the run stops "
        "naming this setting) or the replicas at base_urls. vLLM's CPU build takes 1-2 "
        "min to start on 2 cores; a large model on a GPU, minutes.",
        minimum=1.0,
    )
    reload_timeout_s: float = cfg_field(
        300.0,
        help="Seconds each call of a weight sync may take: a reload from disk, the "
        "embedded server's copy from memory, each phase of vLLM's update (pause, start, "
        "update, finish, resume). Past it the sync fails with one line naming the phase "
        "and this setting (from memory: files for the rest of the run; from disk: the "
        "step is checkpointed and the run stops).",
        minimum=1.0,
    )
    max_batch_size: int = cfg_field(
        128,
        help="Embedded server: most sequences generated together in one forward loop (a "
        "request's n choices count n); 128 = the default recipe's whole step in one loop. "
        "Lower it when a GPU runs out of memory on long answers.",
        minimum=1,
    )
    decoder: str = cfg_field(
        "auto",
        help="Embedded server's decode loop: 'slots' = a preallocated KV cache with one "
        "fixed-shape step per batch size (replayed as a CUDA graph on a GPU), for Llama, "
        "Mistral, Qwen2 and Qwen3 models with full attention; 'model' = the model's own "
        "forward with a growing cache (any model); 'auto' = slots where the model allows.",
        choices=("auto", "slots", "model"),
    )
    cuda_graphs: bool = cfg_field(
        True,
        help="Embedded server on a GPU with decoder slots: capture each batch size's decode "
        "step as a CUDA graph and replay it (one launch per token instead of hundreds).",
    )
    kv_cache_gib: float = cfg_field(
        0.0,
        help="Embedded server with decoder slots: the most GiB its KV cache may take (a "
        "batch that needs more runs on the model's own forward). 0 = a quarter of the "
        "GPU's free memory after loading, or 2 GiB on a CPU.",
        minimum=0.0,
    )
    cpu_threads: int = cfg_field(
        0,
        help="Embedded server on a machine without CUDA: its torch threads. 0 = half the "
        "machine's cores (the other half is the trainer's: trainer.cpu_threads). On 2 cores "
        "a second server thread made generation slower even in sync mode, where the trainer "
        "idles meanwhile (the rollout workers and the driver waking beside it stall OpenMP; "
        "docs/benchmarks.md): raise it on machines with cores to spare.",
        minimum=0,
    )


@dataclass
class ServiceConfig:
    inference_service: InferenceServiceConfig = cfg_field(
        default_factory=InferenceServiceConfig, help="The OpenAI-compatible inference service."
    )


@dataclass
class LoggerConfig:
    backends: list[str] = cfg_field(
        default_factory=lambda: ["jsonl"],
        help="Metric sinks (the progress bar / plain progress lines are always shown): "
        "console (also a log line per step with more metrics), jsonl (output_dir/metrics.jsonl; "
        "always on, listed or not), tensorboard (output_dir/tensorboard), mlflow (a run with "
        "the recipe as params, every metric per step, the reward curve, config.yaml and "
        "summary.json as artifacts; where: mlflow_tracking_uri), wandb (a run under "
        "output_dir/wandb: online or offline by WANDB_MODE, offline when neither it nor "
        "WANDB_API_KEY is set). mlflow and wandb continue their run on a resume (its id is "
        "kept in output_dir/mlflow_run.json, wandb_run.json).",
    )
    mlflow_tracking_uri: str | None = cfg_field(
        None,
        help="Where the mlflow sink logs: an MLflow server (http://host:5000) or any "
        "tracking URI MLflow takes (sqlite:///path.db, databricks, ...). null = the "
        "MLFLOW_TRACKING_URI environment variable if set, else a sqlite database in the run "
        "folder (output_dir/mlflow.db, artifacts in output_dir/mlartifacts; view with "
        "`mlflow ui --backend-store-uri sqlite:///<output_dir>/mlflow.db`). A server that "
        "stops answering mid-run costs one warning after a bounded retry (10 s timeout, 2 "
        "retries): the run goes on, metrics.jsonl stays complete.",
    )
    level: str = cfg_field("INFO", help="Log level.", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    log_file_max_mb: float = cfg_field(
        64.0,
        help="Rotate each log file under output_dir/logs (driver.log, dask-worker-*.log, "
        "inference.log) past this size: driver.log becomes driver.log.1, and so on. 0 = "
        "never rotate. A run logs ~160 bytes per step when all is well, far more when an "
        "evaluator or a worker fails on every sample; this bounds the logs of a week-long "
        "run at (1 + log_file_backups) x this per file.",
        minimum=0.0,
    )
    log_file_backups: int = cfg_field(
        3,
        help="Rotated log files kept per log (.1 the newest); older ones are deleted.",
        minimum=0,
    )
    plot_every: int = cfg_field(
        10, help="Redraw output_dir/plots/*.png every N steps (0 = never).", minimum=0
    )
    plot_min_interval_s: float = cfg_field(
        30.0,
        help="Seconds at least between two redraws while training (a redraw is ~0.1 s of "
        "the driver's CPU; the live curves are on the run's dashboard page); the plots "
        "are always drawn at the end.",
        minimum=0.0,
    )


@dataclass
class RuntimeMonitorConfig:
    health_check_interval_s: float = cfg_field(
        10.0, help="Interval of service and actor health checks.", minimum=0.1
    )
    task_timeout_s: float = cfg_field(
        600.0, help="A rollout/evaluator future running longer is cancelled.", minimum=1.0
    )
    max_task_failures: int = cfg_field(
        20, help="Failed rollouts tolerated before the run stops with an error.", minimum=0
    )
    wait_notice_s: float = cfg_field(
        60.0,
        help="A step that has waited this long for its batch (a slow or hung evaluator or "
        "server) prints a line saying what is in flight and what ends a hung task, and "
        "again every wait_notice_s.",
        minimum=1.0,
    )
    health_timeout_s: float = cfg_field(
        10.0, help="How long one GET /health of the inference server may take.", minimum=0.1
    )
    trainer_silent_s: float = cfg_field(
        180.0,
        help="A trainer rank whose Dask worker sends the scheduler no heartbeat for this "
        "long is taken for hung (stopped with SIGSTOP or a debugger, swapped out, "
        "wedged) and the run stops, naming the rank, resumable from its last checkpoint. "
        "A worker heartbeats every 0.5-5 s, also while it trains. 0 = wait for the "
        "trainer call's own deadline (task_timeout_s + 600 s).",
        minimum=0.0,
    )
    straggler_factor: float = cfg_field(
        0.0,
        help="A training rollout task still running after this many times the median "
        "duration of the recent finished ones (and at least straggler_min_s) is submitted "
        "a second time, on another worker; the first copy to finish is taken, the other "
        "cancelled, and each group is trained once (counted in "
        "rollout/stragglers_backed_up). Off by default (0): a second copy costs its "
        "compute again; 3 is a common choice on clusters with slow nodes.",
        minimum=0.0,
    )
    straggler_min_s: float = cfg_field(
        30.0,
        help="The least time a training task runs before straggler_factor may give it a "
        "second copy.",
        minimum=0.0,
    )
    worker_silent_s: float = cfg_field(
        45.0,
        help="A Dask worker running rollouts or evaluators (not a trainer rank's) that sends "
        "the scheduler no heartbeat for this long is taken for lost (stopped with SIGSTOP "
        "or a debugger, swapped out, wedged): the scheduler drops it at once, so its tasks "
        "run again on the other workers (a group it commits if it wakes is trained once); "
        "on a local cluster it is killed and its nanny starts a fresh one. One line names "
        "it. 45 s is about ten heartbeat intervals of a busy worker (0.5-5 s) and far "
        "below task_timeout_s. 0 = never (wait for task_timeout_s).",
        minimum=0.0,
    )
    min_free_disk_gb: float = cfg_field(
        1.0,
        help="Free space kept on every disk the run writes (output_dir, checkpoints, "
        "snapshots, a local pool), at most 5% of that disk's size: below it the run "
        "checkpoints and stops after the step with one line naming the folder, resumable "
        "by the same command once space is freed (a write that fails first is still a "
        "clear stop). 0 = no check.",
        minimum=0.0,
    )
    disk_warn_hours: float = cfg_field(
        6.0,
        help="Warn (at most once an hour) when, at the rate the fullest of those disks "
        "filled over the last 50 steps, min_free_disk_gb is reached in less than this "
        "many hours and before the run's last step. 0 = no warning.",
        minimum=0.0,
    )
    unhealthy_after: int = cfg_field(
        3,
        help="Consecutive /health checks without an answer (each health_timeout_s, one per "
        "health_check_interval_s) after which a server nexrl started is taken for hung "
        "(e.g. SIGSTOP, a stuck GPU), killed and restarted on the newest weights.",
        minimum=1,
    )


@dataclass
class ResourceConfig:
    trainer_gpus: int = cfg_field(
        1,
        help="'GPU' resource units per trainer actor (CPU runs offer the same name).",
        minimum=0,
    )
    inference_gpus: int = cfg_field(0, help="'GPU' units for the embedded server.", minimum=0)
    rollout_cpus: int = cfg_field(1, help="'CPU' resource units per rollout future.", minimum=0)


@dataclass
class ResumeConfig:
    mode: str = cfg_field(
        "auto",
        help="'disable' (fresh run), 'auto' (continue from the latest checkpoint if any), "
        "'from_path' (continue from path).",
        choices=("disable", "auto", "from_path"),
    )
    path: str | None = cfg_field(None, help="Checkpoint directory for from_path.", path=True)


@dataclass
class WarmStartConfig:
    data_files: list[str] = cfg_field(
        default_factory=list,
        help="Demonstration conversations (JSON lines with 'messages' and optional 'tools', "
        "as in chat fine-tuning data) the tiny model is fine-tuned on, with cross-entropy on the assistant "
        "turns, when it is built (before RL; the result is output_dir/model); empty = no "
        "warm start. The analogue of starting RL from an instruct model: it teaches a format "
        "(e.g. tool calls) RL alone would have to discover token by token.",
        path=True,
    )
    steps: int = cfg_field(300, help="Optimizer steps of the warm start.", minimum=1)
    lr: float = cfg_field(
        3e-3, help="Adam learning rate of the warm start (cosine-decayed to 0).", minimum=0.0
    )
    batch_size: int = cfg_field(16, help="Conversations per warm-start step.", minimum=1)


@dataclass
class TinyModelConfig:
    vocab: list[str] = cfg_field(
        default_factory=list,
        help="Words of the tiny tokenizer: a byte-level BPE (Qwen2) whose merges make each "
        "word one token (digits are always single tokens); other text is encoded as bytes "
        "(see byte_fallback).",
    )
    hidden_size: int = cfg_field(64, help="Hidden size.", minimum=8)
    num_layers: int = cfg_field(2, help="Decoder layers.", minimum=1)
    num_heads: int = cfg_field(4, help="Attention heads (must divide hidden_size).", minimum=1)
    num_kv_heads: int = cfg_field(
        2,
        help="Key/value heads (grouped-query attention; must divide num_heads).",
        minimum=1,
    )
    intermediate_size: int = cfg_field(
        128,
        help="Width of the MLP's hidden layer. The default keeps the tiny model tiny; "
        "about 5.4x hidden_size is a real Qwen2's shape (Qwen2.5-0.5B: hidden 896, "
        "24 layers, 14 heads, 2 key/value heads, 4864: docs/trainer.md's GPU check).",
        minimum=1,
    )
    seed: int = cfg_field(0, help="Initialisation seed.")
    init_std: float = cfg_field(
        0.05,
        help="Std of the initial weights. Small = a near-uniform first policy that "
        "explores every answer; 0.05 learned best over three small tasks, by SFT and by "
        "RL (docs/benchmarks.md, 'Tiny-model init'); 0.2 memorised the SFT data and "
        "answered held-out prompts worst.",
        minimum=0.0,
    )
    byte_fallback: bool = cfg_field(
        True,
        help="Keep all 256 byte tokens so any text encodes; false = only the characters of "
        "vocab and the chat roles, plus the space and the newline (a far smaller output "
        "space, so a tiny policy starts with a fair chance of a right answer; '2 5 7' "
        "encodes, other characters such as ',' are dropped: plain-text tasks only, not "
        "tool calling).",
    )
    added_tokens: list[str] = cfg_field(
        default_factory=list,
        help="Whole strings that become single tokens, matched in text before BPE (the "
        "longest match wins), like Qwen's tool-call marker: e.g. tool-call markup and the tools "
        "block the chat template writes, so a tiny model's context and tool calls are a few "
        "tokens long.",
    )
    warm_start: WarmStartConfig = cfg_field(
        default_factory=WarmStartConfig,
        help="Supervised warm start on demonstrations, once, when the tiny model is built "
        "(seeded by seed).",
    )
    cache: bool = cfg_field(
        True,
        help="Keep the built model (after its warm start) in the cache of built models, "
        "$NEXRL_CACHE_DIR/models (default ~/.cache/nexrl/models), keyed by every field "
        "above, the demonstrations' bytes and the torch/transformers versions, and copy it "
        "from there when a later run asks for the same one (saves the build at start-up); "
        "false = build it in every run.",
    )


@dataclass
class ModelConfig:
    path: str | None = cfg_field(
        None,
        help="Hugging Face model directory (e.g. a local Qwen2.5 copy), or another run's "
        "folder (runs/<name>: its newest snapshot), snapshot folder or snapshots/vN, checked "
        "against its checksums and recorded in <output_dir>/parent.json (staged training); "
        "null = build the tiny model described by 'tiny'.",
        path=True,
    )
    tokenizer_path: str | None = cfg_field(
        None, help="Tokenizer directory (default: path).", path=True
    )
    tiny: TinyModelConfig = cfg_field(
        default_factory=TinyModelConfig, help="Tiny model built from config (tests, CPU demo)."
    )
