"""``rollout_worker``: how prompts become scored trajectories."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexrl.core.config.fields import MISSING, cfg_field


@dataclass
class RolloutWorkerConfig:
    type: str = cfg_field(
        "simple",
        help="Built-in worker: 'simple' (one chat completion per sample), 'agent' "
        "(multi-turn tool-calling agent from agent_config_path) or 'openai_agent' (an "
        "unmodified OpenAI-API agent function, agent_entrypoint, run against a recording "
        "agent service); a class of your own is a BaseRolloutWorker.",
        registry="rollout worker type",
    )
    evaluator: str = cfg_field(
        MISSING,
        help="What scores each rollout: a named evaluator of the library (exact_match, regex, "
        "numeric, fuzzy, multi_criteria, llm_judge, code_execution; options in "
        "evaluator_options) or an evaluator class as 'path/to/file.py:ClassName' (relative "
        "to the workspace root or the recipe folder) or 'package.module:ClassName' (not "
        "needed with mode: sft).",
        rl_only=True,
    )
    evaluator_options: dict[str, Any] = cfg_field(
        default_factory=dict,
        help="Options of a named evaluator (each evaluator's are listed in the user guide, "
        "'Evaluators by name'); an unknown option or a wrong type is reported before any "
        "cluster starts. Must stay empty with an evaluator class.",
    )
    example_answer: str | None = cfg_field(
        None,
        help="A model answer that --check scores with the evaluator on the first training "
        "row (a dry run: the evaluator must return a finite reward); null = no dry run.",
    )
    group_size: int = cfg_field(
        8,
        help="Samples drawn per prompt = trajectories per GRPO group: each prompt is handed "
        "out this many times with the same group_id and run_id 0..n-1, and the pool groups "
        "trajectories (trajectory_pool.key_list) into groups of this size.",
        minimum=1,
    )
    custom_worker: str | None = cfg_field(
        None,
        help="Optional custom rollout worker class as 'path/to/file.py:ClassName' (or "
        "'package.module:ClassName'), a subclass of BaseRolloutWorker; overrides 'type' (the "
        "older form of giving the class as 'type').",
    )
    agent_config_path: str | None = cfg_field(
        None,
        help="agent_config.yaml for type 'agent' (system prompt, llm_config, tools with "
        "bindings to Python functions next to it; see the user guide).",
        path=True,
    )
    agent_entrypoint: str | None = cfg_field(
        None,
        help="Type 'openai_agent': the agent function as 'path/to/agent.py:function', "
        "sync or async, called as function(task, base_url=..., api_key=..., model=...) with the "
        "data row; it uses only the openai client and returns the final answer (a str). Its "
        "model calls are recorded and trained on; it chooses its own sampling settings "
        "(temperature, top_p, max_response_length do not apply).",
    )
    agent_timeout_s: float = cfg_field(
        300.0,
        help="Type 'openai_agent': one episode (one call of the agent function) running "
        "longer fails its rollout.",
        minimum=0.001,
    )
    agent_trajectory: str = cfg_field(
        "per_call",
        help="Types 'agent' and 'openai_agent': 'per_call' = one trajectory per model call "
        "(as NexRL), 'episode' = one trajectory per episode with the tokens between calls "
        "(tool results, user turns) masked out of the loss.",
        choices=("per_call", "episode"),
    )
    max_groups_in_flight: int = cfg_field(
        64,
        help="Most prompt groups rolled out at once (in tasks of groups_per_task groups, "
        "each a rollout future and an evaluator future on the Dask cluster); "
        "back-pressure for large batches.",
        minimum=1,
    )
    groups_per_task: int = cfg_field(
        1,
        help="Prompt groups per Dask task: one rollout future runs their model calls "
        "concurrently, one evaluator future scores them and commits them to the pool in "
        "one commit; a failing group is retried and reported alone. 1 = a task per group "
        "(finest load balance, each group on the dashboard); more cuts the per-future "
        "overhead where rollouts are short (the default recipe: 8, two tasks per step of "
        "16 groups; docs/benchmarks.md 'Versus TRL').",
        minimum=1,
    )
    temperature: float = cfg_field(1.0, help="Sampling temperature.", minimum=0.0)
    seeded_requests: bool = cfg_field(
        True,
        help="Send every model call a sampling seed mixed from (seed, group_id, run_id, call "
        "index): the same recipe samples the same tokens however the server batches requests "
        "(needs a server that honours 'seed': the embedded one and vLLM do).",
    )
    one_request_per_group: bool = cfg_field(
        True,
        help="The 'simple' worker asks for a group's group_size samples in one request with "
        "the OpenAI 'n' parameter instead of one request each (~5x less time in requests for "
        "short answers; the embedded server, vLLM and SGLang honour 'n'). Set false for an "
        "engine that does not.",
    )
    batch_requests: bool = cfg_field(
        True,
        help="Chat requests a rollout task makes at the same moment (its groups' first "
        "model calls) go to the embedded server in one HTTP request "
        "(/v1/chat/completions/batch), each still validated and answered on its own: "
        "1.3x less time for a task's 8 group requests (docs/benchmarks.md). Engines "
        "given by service.inference_service.base_urls or command (vLLM, SGLang) get "
        "every request alone.",
    )
    top_p: float = cfg_field(1.0, help="Nucleus sampling probability mass (0, 1].", minimum=0.0)
    max_response_length: int = cfg_field(
        64,
        help="max_tokens per model call: the response's tokens, its end token included "
        "(an answer of 3 tokens needs 4 to end by itself; at the limit it ends with "
        "finish_reason 'length' and is scored as it is).",
        minimum=1,
    )
    request_timeout_s: float = cfg_field(
        60.0, help="Timeout of one inference request, seconds.", minimum=0.001
    )
    max_retries: int = cfg_field(
        2, help="Retries of a failed inference request (openai client).", minimum=0
    )
    task_retries: int = cfg_field(
        2,
        help="Tries again of a group whose rollout raised (inside its rollout future; Dask "
        "also retries a future that raised as a whole this many times); a group that still failed "
        "(or timed out, or whose workers were lost more often than Dask allows) is then "
        "rolled out again by the controller up to this many times.",
        minimum=0,
    )
    retry_backoff_s: float = cfg_field(
        1.0,
        help="Seconds before the controller rolls out a failed group again, doubled for "
        "each further failure of the same group (1, 2, 4, ... s) up to retry_backoff_max_s; "
        "new groups go out meanwhile. Each delay is a warning in logs/driver.log and adds "
        "to rollout/retry_backoff_s. 0 = retry at once.",
        minimum=0.0,
    )
    retry_backoff_max_s: float = cfg_field(
        30.0, help="The longest backoff of one retry (retry_backoff_s).", minimum=0.0
    )
    max_evaluator_error_steps: int = cfg_field(
        3,
        help="Stop the run (non-zero exit) when the evaluator raised on every sample of "
        "this many consecutive steps' batches, naming the evaluator, the exception and the "
        "first failing row; 0 never stops early. A run whose every step had only evaluator "
        "errors always ends with a non-zero exit, however short.",
        minimum=0,
    )
