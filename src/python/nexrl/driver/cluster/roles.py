"""The Dask resources each role's worker offers, on every cluster type that gives a
role workers of its own (Slurm jobs, Kubernetes worker groups): exactly what that
role's work asks for, whatever the hardware under it, so a trainer actor can be
placed on a CPU partition as on a GPU node.

* ``rollout``: ``CPU`` = the worker's cores (rollout and evaluator futures ask for 1);
* ``trainer``: ``GPU`` = ``resource.trainer_gpus`` (at least 1: one trainer rank);
* ``inference``: ``INFERENCE`` = 1 (the embedded server's host).
"""

from __future__ import annotations

__all__ = ["ROLES", "resources_arg", "role_resources"]

ROLES = ("rollout", "trainer", "inference")


def role_resources(role: str, cores: float, trainer_gpus: int) -> dict[str, float]:
    """The Dask resources a ``role`` worker with ``cores`` cores offers."""
    if role == "rollout":
        return {"CPU": float(cores)}
    if role == "trainer":
        return {"GPU": float(max(1, trainer_gpus))}
    if role == "inference":
        return {"INFERENCE": 1.0}
    raise ValueError(f"unknown worker role {role!r} (one of {', '.join(ROLES)})")


def resources_arg(resources: dict[str, float]) -> list[str]:
    """``dask worker`` arguments offering ``resources``."""
    return ["--resources", ",".join(f"{k}={v:g}" for k, v in resources.items())]
