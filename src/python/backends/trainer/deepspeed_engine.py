"""DeepSpeed training engine (``trainer.backend: deepspeed``).

Built from ``TrainerConfig``: ZeRO stage 0-3 (``zero_stage``), optional CPU
offload of optimizer state (stage >= 1) and parameters (stage 3), bf16 mixed
precision on GPU (``bf16``; ignored on CPU, where training runs in fp32),
``micro_batch_size``, AdamW (``lr``, ``weight_decay``, betas 0.9/0.999, eps
1e-8), the LR schedule of :mod:`nexrl.trainer.schedule` (as a ``LambdaLR``) and
gradient clipping (``grad_clip``; 0 = off).

Distributed set-up: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``
and ``MASTER_PORT`` come from the environment (the trainer actor sets them);
a process without them is rank 0 of a world of 1 on a free local port. The
process group is NCCL on GPU and gloo on CPU. Without CUDA, ``DS_ACCELERATOR``
defaults to ``cpu`` before DeepSpeed is imported.

Gradient accumulation is owned by the trainer: DeepSpeed runs with
``gradient_accumulation_steps: 1`` and the trainer marks the last micro-batch
with ``set_gradient_accumulation_boundary``; losses are never rescaled here
(``scale_wrt_gas=False``). DeepSpeed averages gradients over ranks.

Verified on CPU (gloo): ZeRO 0-3 at world size 1, ZeRO 1/2 at world size 2.
Run on one GPU (docs/trainer.md, "On a GPU"): NCCL at world size 1, bf16, fused
AdamW, ZeRO-1 with gradient checkpointing, ZeRO-3 with CPU offload. Not run:
several GPUs.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import io
import logging
import math
import os
import sys
from datetime import timedelta
from types import FrameType
from typing import Any

import torch

from backends.trainer.deepspeed_config import (
    ADAM_BETAS,
    ADAM_EPS,
    ds_config,
    no_shm_op,
    uses_gpu,
)
from backends.trainer.rendezvous import close_sockets, join_process_group
from nexrl.core.util.net import free_port
from nexrl.trainer.schedule import continue_schedule, lr_lambda

__all__ = ["DeepSpeedEngine", "build_engine", "ds_config", "init_distributed", "uses_gpu"]

REQUIRES = ("deepspeed",)  # checked by nexrl.trainer.engine.load_backend
log = logging.getLogger(__name__)


_IMPORT_MACHINERY = {
    "importlib._bootstrap",
    "importlib._bootstrap_external",
    "_frozen_importlib",
    "_frozen_importlib_external",
}


class _NoMlflowForTheAutotuner(importlib.abc.MetaPathFinder):
    """Refuses ``import mlflow`` to DeepSpeed's autotuner module only.

    ``import deepspeed`` imports ``deepspeed.autotuning.autotuner``, which tries
    ``import mlflow`` to log autotuning experiments (``has_mlflow``). With mlflow
    installed (nexrl's MLflow sink) that import is ~2 s of CPU at every trainer
    rank's start, for a feature nexrl never runs; refused, the autotuner sets
    ``has_mlflow = False``. Any other importer of mlflow (the MLflow sink, in
    another thread) is not affected."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name != "mlflow":
            return None
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") in _IMPORT_MACHINERY:
            frame = frame.f_back
        if (
            frame is not None
            and frame.f_globals.get("__name__") == "deepspeed.autotuning.autotuner"
        ):
            raise ImportError("mlflow is not imported for DeepSpeed's autotuner (nexrl)")
        return None


def import_deepspeed() -> Any:
    """``import deepspeed`` (without its autotuner's mlflow: ``_NoMlflowForTheAutotuner``)."""
    if "deepspeed" in sys.modules:
        return sys.modules["deepspeed"]
    finder = _NoMlflowForTheAutotuner()
    sys.meta_path.insert(0, finder)
    try:
        import deepspeed
    finally:
        sys.meta_path.remove(finder)
    return deepspeed


_STORES: list[Any] = []  # the rendezvous store of this process's group (kept alive)


def init_distributed(timeout_s: float = 600.0) -> tuple[int, int, int]:
    """Join (or create) the process group; returns ``(rank, world_size, local_rank)``."""
    import torch.distributed as dist

    deepspeed = import_deepspeed()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.setdefault("WORLD_SIZE", str(world))
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world} but {', '.join(missing)} not set; start trainers through "
            "nexrl.trainer.actor.TrainerGroup (it sets the rendezvous environment)"
        )
    on_gpu = uses_gpu()
    if not dist.is_initialized():
        _STORES.append(  # the store, on MASTER_ADDR only (backends.trainer.rendezvous)
            join_process_group(
                "nccl" if on_gpu else "gloo",
                int(os.environ["RANK"]),
                world,
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                timeout_s,
            )
        )
        printed = io.StringIO()  # "DeepSpeed ... built successfully": a log line, not output
        with contextlib.redirect_stdout(printed), no_shm_op(not on_gpu and world == 1):
            deepspeed.init_distributed(
                dist_backend="nccl" if on_gpu else "gloo",
                auto_mpi_discovery=False,
                timeout=timedelta(seconds=timeout_s),
                verbose=False,
            )
        for line in printed.getvalue().splitlines():
            if line.strip():
                log.info("deepspeed: %s", line.strip())
    if dist.get_world_size() != world:
        raise RuntimeError(
            f"this process already joined a process group of {dist.get_world_size()} ranks, "
            f"not WORLD_SIZE={world}"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if on_gpu:
        torch.cuda.set_device(local_rank)
    return dist.get_rank(), world, local_rank


class DeepSpeedEngine:
    """:class:`nexrl.trainer.engine.TrainingEngine` on a ``deepspeed.DeepSpeedEngine``."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: Any,
        *,
        total_optimizer_steps: int,
        dist_timeout_s: float = 600.0,
    ) -> None:
        deepspeed = import_deepspeed()
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)
        self.rank, self.world_size, self.local_rank = init_distributed(dist_timeout_s)
        self.on_gpu = uses_gpu()
        self.device = torch.device("cuda", self.local_rank) if self.on_gpu else torch.device("cpu")
        self.zero_stage = cfg.zero_stage
        self.bf16 = cfg.bf16 and self.on_gpu
        hf_model: Any = model
        if cfg.gradient_checkpointing:
            # transformers >= 5.2x names it activation checkpointing (the old name warns)
            enable = getattr(hf_model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                hf_model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        if hasattr(hf_model, "config"):
            hf_model.config.use_cache = False
        config = ds_config(cfg, world_size=self.world_size, on_gpu=self.on_gpu)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = None
        if "optimizer" not in config:
            extra = {"fused": True} if self.on_gpu else {}
            optimizer = torch.optim.AdamW(
                params,
                lr=cfg.lr,
                weight_decay=cfg.weight_decay,
                betas=ADAM_BETAS,
                eps=ADAM_EPS,
                **extra,
            )
        factor = lr_lambda(cfg.lr_scheduler, cfg.warmup_steps, int(total_optimizer_steps))

        def make_scheduler(opt: torch.optim.Optimizer) -> Any:
            return torch.optim.lr_scheduler.LambdaLR(opt, factor)

        engine, _, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=params if optimizer is None else None,
            optimizer=optimizer,
            lr_scheduler=make_scheduler,
            config=config,
            dist_init_required=False,
        )
        self.engine = engine
        self.config = config
        self.base_lr = cfg.lr

    # -- compute ----------------------------------------------------------------
    @property
    def module(self) -> torch.nn.Module:
        module: torch.nn.Module = self.engine.module
        return module

    def forward(self, **inputs: Any) -> Any:
        return self.engine(**inputs)

    def train(self, mode: bool = True) -> None:
        self.engine.train(mode)

    def set_boundary(self, is_boundary: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(is_boundary)

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        pre = self._param_grad_norm() if self.zero_stage == 0 else None
        if pre is not None and not math.isfinite(pre):  # stage 0 has no overflow check
            self.discard_gradients()
            return pre
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        if norm is None:
            norm = pre
        if not self.engine.was_step_applied():  # ZeRO's own overflow check skipped it
            return math.inf if norm is None or math.isfinite(float(norm)) else float(norm)
        return float(norm) if norm is not None else math.nan

    def discard_gradients(self) -> None:
        """Drop the accumulated gradients, no update.

        Stage 0: the gradients are the parameters' ``.grad`` (already all-reduced):
        cleared. ZeRO 1-3 keep them in their own partitioned buffers, so the engine's
        ``step()`` runs with the optimizer's overflow check forced to report an
        overflow: DeepSpeed's own skip path then clears those buffers and leaves the
        parameters, the optimizer state and the LR schedule as they were (what it
        does for an fp16 overflow).
        """
        if self.zero_stage == 0:
            self.engine.zero_grad()
            return
        opt: Any = self.engine.optimizer
        saved = dict(vars(opt))
        if self.zero_stage == 3:

            def overflow_check(update_scale: bool = True) -> bool:
                opt.overflow = True
                return True if not update_scale else opt._loss_scale_update_and_overflow_cleanup()

            opt._overflow_check_and_loss_scale_update = overflow_check
        else:

            def check_overflow(partition_gradients: bool = True) -> None:
                opt.overflow = True

            opt.check_overflow = check_overflow
            opt.check_grad_overflow = True
        try:
            self.engine.step()
        finally:
            for name in ("_overflow_check_and_loss_scale_update", "check_overflow"):
                if name not in saved:
                    vars(opt).pop(name, None)
            if "check_grad_overflow" in saved:
                opt.check_grad_overflow = saved["check_grad_overflow"]
        if self.engine.was_step_applied():
            raise RuntimeError(
                "DeepSpeed applied an update that was to be skipped (a non-finite loss): "
                "this DeepSpeed version's ZeRO overflow path changed"
            )

    def _param_grad_norm(self) -> float | None:
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return None
        return float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])

    # -- communication ------------------------------------------------------------
    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        out = tensor.detach().to(self.device).clone()
        if self.world_size > 1:
            dist.all_reduce(out)
        return out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        local = tensor.detach().to(self.device).contiguous()
        if self.world_size == 1:
            return local
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local)
        return torch.cat(parts, dim=0)

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.world_size > 1:
            if self.on_gpu:
                dist.barrier(device_ids=[self.local_rank])
            else:
                dist.barrier()

    # -- state ------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        if self.zero_stage == 3:
            state: dict[str, torch.Tensor] | None = (
                self.engine._zero3_consolidated_16bit_state_dict()
            )
            return state
        if self.rank != 0:
            return None
        return {k: v.detach() for k, v in self.module.state_dict().items()}

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        self.engine.save_checkpoint(save_dir, tag=tag, client_state={}, save_latest=False)

    def load_checkpoint(self, load_dir: str, tag: str) -> None:
        path, _ = self.engine.load_checkpoint(
            load_dir, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load checkpoint {load_dir}/{tag}")
        if self.engine.lr_scheduler is not None:  # the recipe's schedule, at the loaded step
            continue_schedule(self.engine.lr_scheduler, self.base_lr)

    def close(self, destroy_process_group: bool = False) -> None:
        destroy = getattr(self.engine, "destroy", None)
        if callable(destroy):
            destroy()
        if destroy_process_group:
            import deepspeed.comm as ds_comm
            import torch.distributed as dist

            if dist.is_initialized():  # DeepSpeed's own teardown also drops its cached groups
                ds_comm.destroy_process_group()
            _STORES.clear()
            close_sockets()  # the rendezvous port closes with the group


def build_engine(
    model: torch.nn.Module,
    cfg: Any,
    *,
    total_optimizer_steps: int,
    dist_timeout_s: float = 600.0,
) -> DeepSpeedEngine:
    """The backend entry point ``nexrl.trainer.engine.load_backend`` looks up."""
    return DeepSpeedEngine(
        model, cfg, total_optimizer_steps=total_optimizer_steps, dist_timeout_s=dist_timeout_s
    )
