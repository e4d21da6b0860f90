"""The trainer's checks: type and backend, the ZeRO settings, a custom trainer class.

``zero_problems`` is the one statement of the ZeRO rules: the recipe check
reports them, and the DeepSpeed config builder (``backends.trainer.deepspeed_engine.ds_config``)
refuses a config that breaks them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nexrl.core.config.checks import register_check
from nexrl.core.config.errors import RecipeError
from nexrl.core.config.sections.runtime import ADAPTER_BACKENDS
from nexrl.core.config.sections.trainer import TRAINER_BACKENDS
from nexrl.core.plugins import load_spec

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's --max-lora-rank choices

__all__ = [
    "custom_trainer",
    "lora",
    "sft_mode",
    "trainer_fits_backend",
    "value_model",
    "zero_problems",
]


def zero_problems(zero_stage: int, offload_optimizer: bool, offload_param: bool) -> list[str]:
    """What is wrong with these DeepSpeed ZeRO settings (empty when they fit together)."""
    out = []
    if zero_stage not in (0, 1, 2, 3):
        out.append(f"trainer.zero_stage: DeepSpeed ZeRO stages are 0-3, got {zero_stage}")
    if offload_param and zero_stage != 3:
        out.append("trainer.offload_param needs trainer.zero_stage: 3")
    if offload_optimizer and zero_stage == 0:
        out.append("trainer.offload_optimizer needs trainer.zero_stage >= 1")
    return out


@register_check
def trainer_fits_backend(cfg: DictConfig, roots: list[Path]) -> list[str]:
    from nexrl.trainer.engine import TRAINING_ENGINES
    from nexrl.trainer.registry import TRAINERS

    t = cfg.trainer
    out = TRAINERS.problems(t.type, roots) + TRAINING_ENGINES.problems(t.backend, roots)
    # a built-in trainer on another built-in engine; a plugin's pairs are its own to know
    allowed = TRAINER_BACKENDS.get(t.type)
    builtin_engines = {b for bs in TRAINER_BACKENDS.values() for b in bs}
    if not out and allowed is not None and t.backend in builtin_engines - set(allowed):
        out.append(
            f"trainer.type '{t.type}' runs on backend(s) {', '.join(allowed)}, "
            f"not trainer.backend '{t.backend}'"
        )
    out.extend(zero_problems(int(t.zero_stage), bool(t.offload_optimizer), bool(t.offload_param)))
    return out


@register_check
def custom_trainer(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``trainer.custom_trainer`` names a class that loads and has ``prepare_batch``."""
    spec = cfg.trainer.custom_trainer
    if not spec:
        return []
    field = "trainer.custom_trainer"
    try:
        obj: Any = load_spec(str(spec), roots, field)
    except RecipeError as exc:
        return list(exc.problems)
    if not callable(getattr(obj, "prepare_batch", None)):
        return [f"{field}: {str(spec).rpartition(':')[2]} has no 'prepare_batch' method"]
    return []


@register_check
def sft_mode(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``mode: sft`` trains ``self_hosted_sft`` on well-formed conversation files."""
    if cfg.get("mode", "rl") != "sft":
        return []
    out = []
    if cfg.trainer.type != "self_hosted_sft" and not cfg.trainer.custom_trainer:
        out.append(
            f"trainer.type: mode sft trains with cross-entropy; set trainer.type: "
            f"self_hosted_sft (got '{cfg.trainer.type}')"
        )
    from nexrl.core.config.paths import resolve_path
    from nexrl.core.conversations import WarmStartError, load_demos

    for field, files in (
        ("data.data_files", list(cfg.data.data_files)),
        ("validate.data_files", list(cfg.validate.data_files)),
    ):
        paths = [resolve_path(str(f), roots) for f in files]
        if not files or any(p is None for p in paths):
            continue  # missing or not found: the structure check reports it
        try:
            load_demos([p for p in paths if p is not None], field)
        except WarmStartError as exc:
            out.append(str(exc))
    return out


@register_check
def lora(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``trainer.lora``: a usable adapter setting when ``rank`` > 0."""
    lo = cfg.trainer.get("lora")
    if lo is None or int(lo.rank) == 0:
        return []
    out = []
    if not list(lo.target_modules):
        out.append("trainer.lora.target_modules: empty; name the modules that get adapters")
    if not 0.0 <= float(lo.dropout) < 1.0:
        out.append(f"trainer.lora.dropout: must be in [0, 1), got {lo.dropout}")
    svc = OmegaConf.select(cfg, "service.inference_service", default={})
    backend = svc.get("backend", "embedded")
    if backend not in ("embedded", *ADAPTER_BACKENDS):
        out.append(
            f"trainer.lora: LoRA snapshots are served by the embedded server and vLLM, not "
            f"service.inference_service.backend '{backend}' (its reload loads full weights)"
        )
    if backend == "vllm" and list(lo.get("modules_to_save") or []):
        out.append(
            "trainer.lora.modules_to_save: vLLM loads adapters without modules trained in "
            "full (it refuses them: 'vLLM only supports modules_to_save being None'); "
            "remove it, or serve with the embedded server"
        )
    command = str(svc.get("command") or "")
    if backend == "vllm" and command and "--enable-lora" not in command.split():
        rank = next((r for r in VLLM_LORA_RANKS if r >= int(lo.rank)), int(lo.rank))
        out.append(
            "service.inference_service.command: a LoRA run loads its adapters into vLLM at "
            f"run time; add --enable-lora --max-lora-rank {rank} to the command"
        )
    return out


@register_check
def training_service_mode(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``trainer.mode: training-service``: RL runs, one trainer rank, an http(s) URL."""
    t = cfg.trainer
    url = t.get("service_url")
    if t.get("mode", "self-hosted") != "training-service":
        if url:
            return [
                "trainer.service_url: set but trainer.mode is 'self-hosted'; set "
                "trainer.mode=training-service to use the service, or remove the URL"
            ]
        return []
    out = []
    if cfg.get("mode", "rl") != "rl":
        out.append(
            f"trainer.mode: 'training-service' runs RL recipes only (this recipe has mode: "
            f"{cfg.get('mode')}); use trainer.mode=self-hosted"
        )
    if int(t.world_size) != 1:
        out.append(
            f"trainer.world_size: the training service runs one trainer rank, got "
            f"{t.world_size}; set trainer.world_size=1 or trainer.mode=self-hosted"
        )
    if url and not str(url).startswith(("http://", "https://")):
        out.append(f"trainer.service_url: {url!r} is not an http(s):// URL")
    return out


@register_check
def value_model(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """An advantage estimator that needs a critic's values (gae, nstep) runs on a trainer
    that trains one (``self_hosted_ppo``, or a class with ``has_critic``), self-hosted."""
    from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS
    from nexrl.trainer.algorithms.value import estimator_takes_values
    from nexrl.trainer.registry import resolve_trainer_class

    name = cfg.algorithm.advantage_estimator
    if cfg.get("mode", "rl") != "rl" or name not in ADVANTAGE_ESTIMATORS:
        return []  # registered_algorithms names an unknown one
    needs = estimator_takes_values(ADVANTAGE_ESTIMATORS.get(name))
    try:
        has = bool(getattr(resolve_trainer_class(cfg.trainer, roots), "has_critic", False))
    except RecipeError:
        return []  # trainer_fits_backend / custom_trainer say what is wrong
    if needs and not has:
        return [
            f"algorithm.advantage_estimator: {name!r} needs a value model; set "
            "trainer.type: self_hosted_ppo (it trains one beside the policy)"
        ]
    if has and not needs:
        return [
            f"trainer.type: {cfg.trainer.type!r} trains a value model that advantage "
            f"estimator {name!r} does not use; set algorithm.advantage_estimator: gae (or "
            "nstep), or trainer.type: self_hosted_grpo"
        ]
    if has and cfg.trainer.get("mode", "self-hosted") == "training-service":
        return [
            "trainer.mode: the training service does not train a value model (PPO with a "
            "critic); use trainer.mode: self-hosted, or a critic-free estimator (grpo, rloo)"
        ]
    return []
