"""``InferenceSpec``: what the inference wing needs from the recipe, typed.

Built once from the checked recipe (``InferenceSpec.from_recipe``) in the driver;
the ``InferenceSupervisor`` reads nothing else of the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nexrl.core.config.sections.runtime import InferenceServiceConfig

if TYPE_CHECKING:
    from nexrl.core.config.schema import RecipeConfig

__all__ = ["InferenceSpec"]


@dataclass(frozen=True)
class InferenceSpec:
    """The inference service and how it is watched.

    Attributes:
        service: ``service.inference_service`` (what runs, where, its timeouts).
        seed: the recipe's ``seed``, given to a server nexrl starts.
        health_timeout_s / unhealthy_after: ``runtime_monitor``'s: one ``/health``
            check's deadline, and the checks in a row without an answer after which
            a server nexrl started is killed and replaced.
        wait_notice_s: ``runtime_monitor.wait_notice_s``: a line this often while
            given replicas are not healthy yet.
        snapshot_root: ``weight.snapshot_dir``: the only folder a server reloads from.
        lora_name: the adapter's served name when the policy is a LoRA adapter its
            backend serves by name (``nexrl.inference.lora``), else None.
        reload_timeout_s: ``service.inference_service.reload_timeout_s``: each call
            of a weight sync.
    """

    service: InferenceServiceConfig
    seed: int = 0
    health_timeout_s: float = 10.0
    unhealthy_after: int = 3
    wait_notice_s: float = 60.0
    snapshot_root: Path | None = None
    lora_name: str | None = None
    reload_timeout_s: float = 300.0

    @classmethod
    def from_recipe(cls, cfg: RecipeConfig) -> InferenceSpec:
        from nexrl.inference.lora import adapter_model_name

        rm = cfg.runtime_monitor
        return cls(
            service=cfg.service.inference_service,
            seed=cfg.seed,
            health_timeout_s=rm.health_timeout_s,
            unhealthy_after=rm.unhealthy_after,
            wait_notice_s=rm.wait_notice_s,
            snapshot_root=Path(cfg.weight.snapshot_dir),
            lora_name=adapter_model_name(cfg),
            reload_timeout_s=cfg.service.inference_service.reload_timeout_s,
        )
