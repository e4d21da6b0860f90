"""The DeepSpeed side of a trainer process before any engine exists: where DeepSpeed
runs (``DS_ACCELERATOR``: ``cpu`` without CUDA, set before DeepSpeed is imported) and
builds its ops (``TORCH_EXTENSIONS_DIR``), the DeepSpeed config of a
``TrainerConfig`` (``ds_config``), and the CPU comm op a single rank skips.
The engine itself: ``backends.trainer.deepspeed_engine``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from nexrl.trainer.checks import zero_problems

__all__ = ["ADAM_BETAS", "ADAM_EPS", "ds_config", "no_shm_op", "uses_gpu"]

if "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available():
    os.environ["DS_ACCELERATOR"] = "cpu"


def _extensions_dir() -> str:
    """A JIT-extension cache folder of this Python environment's own.

    DeepSpeed compiles its ops (on CPU: the shared-memory comm op, ~3.5 min on 2
    cores) into ``~/.cache/torch_extensions/<py>_<device>/<op>``, a folder shared by
    every environment: a build from another venv (``./pants run`` and ``./pants
    test`` use different ones) names other include paths, so each switch rebuilt
    it. Keyed by where torch is installed, each environment builds once.
    """
    import hashlib

    key = hashlib.sha256(os.path.dirname(torch.__file__).encode()).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_extensions", f"nexrl-{torch.__version__}-{key}")


os.environ.setdefault("TORCH_EXTENSIONS_DIR", _extensions_dir())

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def uses_gpu() -> bool:
    """True when CUDA is present and DeepSpeed is not forced onto the CPU accelerator."""
    return torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR", "cuda") != "cpu"


def ds_config(cfg: Any, *, world_size: int, on_gpu: bool) -> dict[str, Any]:
    """The DeepSpeed config dict for a ``TrainerConfig`` (pure: no DeepSpeed import)."""
    stage = cfg.zero_stage
    problems = zero_problems(stage, cfg.offload_optimizer, cfg.offload_param)
    if problems:
        raise ValueError("; ".join(problems))
    zero: dict[str, Any] = {"stage": stage}
    if stage >= 1:
        zero.update(contiguous_gradients=True, overlap_comm=on_gpu, reduce_scatter=True)
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": on_gpu}
    if cfg.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": on_gpu}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    micro = cfg.micro_batch_size
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "train_batch_size": micro * world_size,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": zero,
        # bf16: ZeRO skips an update whose gradient norm is NaN/inf only when asked to
        "bf16": {"enabled": cfg.bf16 and on_gpu, "check_grad_overflow": True},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if cfg.offload_optimizer:  # DeepSpeed's CPU Adam runs the offloaded update
        config["optimizer"] = {
            "type": "AdamW",
            "params": {
                "lr": cfg.lr,
                "weight_decay": cfg.weight_decay,
                "betas": list(ADAM_BETAS),
                "eps": ADAM_EPS,
            },
        }
    return config


@contextlib.contextmanager
def no_shm_op(skip: bool) -> Any:
    """While ``skip``: DeepSpeed's CPU backend does not build its shared-memory comm op.

    That op only speeds up all-reduces between CPU ranks of one node; a single rank
    has none to do, and building it is a C++ compile of minutes on a new machine (the
    backend falls back to torch.distributed without it, as on a build that lacks it).
    """
    if not skip:
        yield
        return
    import importlib

    # the module, not the attribute: deepspeed.comm's namespace binds "torch" to torch
    ds_torch: Any = importlib.import_module("deepspeed.comm.torch")

    build = ds_torch.build_shm_op
    ds_torch.build_shm_op = lambda: None
    try:
        yield
    finally:
        ds_torch.build_shm_op = build
