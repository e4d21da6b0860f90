"""Turn a validated recipe into the typed pieces the controller drives.

Everything here runs before the cluster starts or right after, and fails with a
message that names the recipe field when the recipe cannot work.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from nexrl.core.config.paths import resolve_path
from nexrl.core.config.schema import RecipeConfig
from nexrl.core.plugins import split_spec
from nexrl.core.pool.config import PoolConfig
from nexrl.driver.controller.sync import SyncPolicy
from nexrl.driver.data.loader import LoaderConfig
from nexrl.driver.modeling.folder import load_tokenizer
from nexrl.driver.recipe import Recipe
from nexrl.inference.lora import request_model_name
from nexrl.rollout.worker.tasks import RolloutSpec

__all__ = [
    "data_config",
    "load_tokenizer",
    "loaded_classes_line",
    "pad_token_id",
    "pool_config",
    "prompt_length_fn",
    "rollout_spec",
    "validation_groups",
]

logger = logging.getLogger(__name__)


def _resolve_files(recipe: Recipe, files: list[str]) -> list[str]:
    return [str(recipe.resolve(f)) for f in files]


def data_config(recipe: Recipe, model_dir: Path | None = None) -> LoaderConfig:
    """The loader's config: the ``data`` section (files resolved), the group size and the
    fields every row must hold (the evaluator's ``required_fields``: a row without one
    is a bad row, named with its file and line, ``data.bad_rows``); with ``model_dir``,
    the longest prompt its context leaves room for (``context_limit``)."""
    spec = recipe.spec
    data = replace(spec.data, data_files=_resolve_files(recipe, list(spec.data.data_files)))
    loader = LoaderConfig.from_section(
        data,
        spec.rollout_worker.group_size,
        recipe.required_data_fields(),
    )
    limit = context_limit(spec.rollout_worker.max_response_length, model_dir)
    return replace(loader, context_limit=limit)


def context_limit(answer: int, model_dir: Path | None) -> tuple[int, str] | None:
    """``(tokens, why)``: the longest prompt that leaves room for an answer of
    ``answer`` (``rollout_worker.max_response_length``) tokens in the model's context
    (``max_position_embeddings`` of its ``config.json``); None when not known. A longer
    prompt failed every rollout of its group with the server's 400 ("maximum context
    length is 512 tokens") until ``max_task_failures`` stopped the run."""
    if model_dir is None:
        return None
    try:
        ctx = int(
            json.loads((Path(model_dir) / "config.json").read_text())["max_position_embeddings"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    why = f"the model's context of {ctx} tokens less rollout_worker.max_response_length={answer}"
    return max(1, ctx - answer), why


def pool_config(cfg: RecipeConfig, policy: SyncPolicy) -> PoolConfig:
    """The pool's config: the ``trajectory_pool`` section, the group size, dynamic
    sampling (``algorithm.filter_zero_variance_groups``: the pool filters the groups) and
    dedup (a group that a re-run Dask task committed twice is delivered once, and its
    batch is filled up from the pool)."""
    pool = PoolConfig.from_section(
        cfg.trajectory_pool,
        cfg.rollout_worker.group_size,
        filter_zero_variance=cfg.algorithm.filter_zero_variance_groups,
        dedup_groups=True,
    )
    if pool.max_staleness is None and policy.max_staleness is not None:
        pool = replace(pool, max_staleness=policy.max_staleness)
    return pool


def _where(recipe: Recipe, spec: tuple[str, str]) -> str:
    """``Class (/abs/file.py)`` or ``Class (module pkg.mod)`` for the log."""
    file, name = spec
    path = resolve_path(file, recipe.roots)
    return f"{name} ({path})" if path is not None else f"{name} (module {file})"


def evaluator_spec(recipe: Recipe) -> tuple[str, str]:
    """``(file or module, class)`` of the evaluator; ``("nexrl.rollout.evaluators", name)`` for a
    named one."""
    from nexrl.rollout.evaluators.registry import NAMED_SOURCE, is_named

    spec = recipe.spec.rollout_worker.evaluator
    if is_named(spec):
        return NAMED_SOURCE, spec
    return split_spec(spec, "rollout_worker.evaluator")


def loaded_classes_line(recipe: Recipe) -> str:
    """One line naming the rollout worker and evaluator classes the run loads, and where."""
    rw = recipe.spec.rollout_worker
    if rw.custom_worker:
        spec = split_spec(rw.custom_worker, "rollout_worker.custom_worker")
        worker = f"{_where(recipe, spec)} (rollout_worker.custom_worker)"
    elif ":" in rw.type:
        spec = split_spec(rw.type, "rollout_worker.type")
        worker = f"{_where(recipe, spec)} (rollout_worker.type)"
    else:
        from nexrl.rollout.worker.registry import ROLLOUT_WORKERS

        cls = ROLLOUT_WORKERS.get(rw.type)
        if cls.__module__.startswith("nexrl."):
            worker = f"built-in type '{rw.type}' (rollout_worker.type)"
        else:  # a plugin's
            where = getattr(sys.modules.get(cls.__module__), "__file__", cls.__module__)
            worker = f"{cls.__name__} ({where}), type '{rw.type}' (rollout_worker.type)"
    evaluator = _where(recipe, evaluator_spec(recipe))
    return f"rollout worker: {worker}; evaluator: {evaluator}"


def rollout_spec(recipe: Recipe, pool: PoolConfig, base_urls: list[str]) -> RolloutSpec:
    cfg = recipe.spec
    rw, svc = cfg.rollout_worker, cfg.service.inference_service
    logger.info(loaded_classes_line(recipe))
    custom = None
    if rw.custom_worker:
        custom = split_spec(rw.custom_worker, "rollout_worker.custom_worker")
    sampling = {
        "temperature": rw.temperature,
        "top_p": rw.top_p,
        "max_tokens": rw.max_response_length,
    }
    return RolloutSpec(
        worker_type=rw.type,
        evaluator=evaluator_spec(recipe),
        evaluator_options=json.dumps(rw.evaluator_options, sort_keys=True),
        roots=tuple(str(r) for r in recipe.roots),
        base_urls=tuple(base_urls),
        served_model_name=request_model_name(cfg),  # LoRA on vLLM: the adapter's name
        sampling=tuple(sampling.items()),
        pool=pool,
        custom_worker=custom,
        api_key=svc.api_key,
        timeout_s=rw.request_timeout_s,
        max_retries=rw.max_retries,
        prompt_key=cfg.data.prompt_key,
        agent_config=str(recipe.resolve(rw.agent_config_path)) if rw.agent_config_path else None,
        agent_trajectory=rw.agent_trajectory,
        agent_entrypoint=rw.agent_entrypoint or None,
        agent_timeout_s=rw.agent_timeout_s,
        seed=cfg.seed if rw.seeded_requests else None,
        group_requests=rw.one_request_per_group,
        # replicas given by URL (vLLM, SGLang) do not report the version they serve:
        # the controller's record of what it loaded tags the replies
        # engines that report no policy version: replicas at base_urls, or one that
        # nexrl starts by service.inference_service.command (vLLM, SGLang)
        versions_from_pool=bool(svc.base_urls or svc.command),
        # only the embedded server nexrl starts has the batch route
        batch_requests=rw.batch_requests and not (svc.base_urls or svc.command),
    )


def prompt_length_fn(tok: Any) -> Any:
    """Prompt length in tokens as the inference service will see it (chat template
    applied); None (the loader's word count) when the tokenizer has no chat template."""
    if not getattr(tok, "chat_template", None):
        return None

    def length(prompt: Any) -> int:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        ids: Any = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    return length


def pad_token_id(tok: Any) -> int:
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return int(pad or 0)


def validation_groups(
    recipe: Recipe, length: Any, model_dir: Path | None = None
) -> list[list[dict[str, Any]]]:
    """Every validation prompt once (one sample each, file order)."""
    from nexrl.driver.data import DataLoader

    v = recipe.spec.validate
    if not v.data_files:
        return []
    data = data_config(recipe, model_dir)
    cfg = replace(
        data,
        data_files=_resolve_files(recipe, list(v.data_files)),
        shuffle=False,
        group_size=1,
        total_epochs=1,
        max_samples=None,
        drop_last=False,
        files_field="validate.data_files",
    )
    loader = DataLoader(cfg, length)
    return loader.next_batch(len(loader))
