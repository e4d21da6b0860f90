"""A single-process ``TrainingEngine`` in plain PyTorch (AdamW, LambdaLR, grad clipping).

Unit tests use it to exercise trainer logic without DeepSpeed; it also shows the
engine protocol at its smallest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nexrl.trainer.schedule import continue_schedule, lr_lambda


class PlainEngine:
    rank = 0
    world_size = 1
    zero_stage = 0

    def __init__(self, model: torch.nn.Module, cfg: Any, *, total_optimizer_steps: int) -> None:
        self.device = torch.device("cpu")
        self._module = model.train()
        self.cfg = cfg
        self.opt = torch.optim.AdamW(
            model.parameters(),
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            betas=(0.9, 0.999),
            eps=1e-8,
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lr_lambda(cfg.lr_scheduler, cfg.warmup_steps, total_optimizer_steps)
        )

    @property
    def module(self) -> torch.nn.Module:
        return self._module

    def forward(self, **inputs: Any) -> Any:
        return self._module(**inputs)

    def train(self, mode: bool = True) -> None:
        self._module.train(mode)

    def set_boundary(self, is_boundary: bool) -> None:
        pass

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self._module.parameters(), clip)
        if not torch.isfinite(norm):  # the protocol: no update on NaN/inf gradients
            self.discard_gradients()
            return float(norm)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return float(norm)

    def discard_gradients(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def lr(self) -> float:
        return float(self.opt.param_groups[0]["lr"])

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().clone()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach()

    def barrier(self) -> None:
        pass

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self._module.state_dict().items()}

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        path = Path(save_dir) / tag
        path.mkdir(parents=True, exist_ok=True)
        state = {
            "model": self._module.state_dict(),
            "opt": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
        }
        torch.save(state, path / "state.pt")

    def load_checkpoint(self, load_dir: str, tag: str) -> None:
        state = torch.load(Path(load_dir) / tag / "state.pt", weights_only=False)
        self._module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        continue_schedule(self.sched, self.cfg.lr)

    def close(self, destroy_process_group: bool = False) -> None:
        pass


def plain_trainer(spec: Any, cls: Any = None) -> Any:
    """A trainer of ``spec``'s class on a ``PlainEngine``."""
    from nexrl.trainer.base import SelfHostedTrainer
    from nexrl.trainer.registry import resolve_trainer_class

    cls = cls or resolve_trainer_class(spec.trainer, spec.roots)
    model = SelfHostedTrainer._load_model(spec.model_path, torch.float32)
    total = spec.trainer.total_train_steps * spec.trainer.ppo_epochs
    engine = PlainEngine(model, spec.trainer, total_optimizer_steps=total)
    return cls(spec, engine=engine, model=model)
