"""The training-engine interface trainers program against, and the engine registry.

``TRAINING_ENGINES`` maps ``trainer.backend`` to a ``build_engine(model, config, *,
total_optimizer_steps, dist_timeout_s) -> TrainingEngine`` function. Engines
register themselves: ``backends/__init__.py`` registers ``deepspeed`` lazily
(``backends.trainer.deepspeed_engine:build_engine``, imported only when a recipe
selects it, so ``nexrl`` never imports DeepSpeed at module import time); a
plugin adds its own with ``@TRAINING_ENGINES.register("name")`` or names a
function directly, ``trainer.backend: path/to/file.py:build_engine``. The
engine's module may list the packages it needs in ``REQUIRES``.

Gradient accumulation is driven by the trainer, not by the engine's counter:
before each micro-batch's forward the trainer calls
``set_boundary(is_last_micro_batch)``; ``backward(loss)`` never rescales the
loss (the trainer already scaled it, see ``nexrl.trainer.base``); ``step()``
applies the update once per accumulated batch and returns the gradient norm, or
applies nothing and returns a non-finite norm when the gradients are not finite;
``discard_gradients()`` drops an accumulated batch whose loss was not finite.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from nexrl.core.config.errors import RecipeError
from nexrl.core.plugins.registry import Registry

__all__ = ["TRAINING_ENGINES", "TrainingEngine", "load_backend"]


@runtime_checkable
class TrainingEngine(Protocol):
    """A data-parallel training engine around one model (one instance per rank)."""

    rank: int
    world_size: int
    device: torch.device
    zero_stage: int

    @property
    def module(self) -> torch.nn.Module:
        """The wrapped model (parameters may be partitioned under ZeRO-3)."""
        ...

    def forward(self, **inputs: Any) -> Any:
        """Run the model (through the engine, so ZeRO-3 gathers parameters)."""
        ...

    def train(self, mode: bool = True) -> None: ...

    def set_boundary(self, is_boundary: bool) -> None:
        """Whether the next forward/backward is the last micro-batch before ``step``."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of ``loss`` (already scaled by the trainer)."""
        ...

    def step(self) -> float:
        """Apply the optimizer and LR-schedule step; the global gradient norm (pre-clip).

        When the gradients are not finite (NaN/inf) no update is applied (parameters,
        optimizer state and LR schedule unchanged, gradients dropped) and the returned
        norm is not finite: that is how the trainer knows the update was skipped.
        """
        ...

    def discard_gradients(self) -> None:
        """Drop the accumulated gradients without an update (collective: every rank
        calls it instead of ``step``); parameters, optimizer state and LR schedule stay."""
        ...

    def lr(self) -> float:
        """The learning rate the next ``step`` uses."""
        ...

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (returns a new tensor on the tensor's device)."""
        ...

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate equal-shaped tensors of every rank along dim 0, in rank order."""
        ...

    def barrier(self) -> None: ...

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Consolidated weights on rank 0 (collective under ZeRO-3); None on other ranks."""
        ...

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        """Collective: model, optimizer and scheduler state under ``save_dir/tag``."""
        ...

    def load_checkpoint(self, load_dir: str, tag: str) -> None:
        """Collective: restore what ``save_checkpoint`` wrote."""
        ...

    def close(self, destroy_process_group: bool = False) -> None:
        """Free the engine; optionally leave the process group (a later group may form)."""
        ...


BuildEngine = Callable[..., TrainingEngine]

TRAINING_ENGINES: Registry[BuildEngine] = Registry("training engine", field="trainer.backend")


def load_backend(name: str) -> BuildEngine:
    """The ``build_engine`` function ``trainer.backend`` names (its module imported now)."""
    try:
        build = TRAINING_ENGINES.get(name)
    except (KeyError, RecipeError) as exc:
        cause = exc.problems[0] if isinstance(exc, RecipeError) else str(exc)
        raise RecipeError(
            [
                f"trainer.backend '{name}': cannot import it ({cause}); install the "
                f"backend's packages (deepspeed for 'deepspeed') or pick another backend"
            ]
        ) from None
    module = sys.modules.get(getattr(build, "__module__", ""), None)
    missing = [m for m in getattr(module, "REQUIRES", ()) if importlib.util.find_spec(m) is None]
    if missing:
        raise RecipeError(
            [
                f"trainer.backend '{name}' needs {', '.join(missing)}, which is not installed "
                f"(pip install {' '.join(missing)})"
            ]
        )
    if not callable(build):
        raise RecipeError([f"trainer.backend '{name}': {build!r} is not a build_engine function"])
    return build
