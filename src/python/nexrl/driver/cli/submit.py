"""The commands of ``nexrl train`` that hand a run to a cluster instead of running it
here: ``--sbatch`` (the driver as a Slurm batch job) and the ``--dry-run`` of a
Kubernetes run (its manifests)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from nexrl.core.errors import NexrlError

if TYPE_CHECKING:
    from nexrl.driver.recipe import Recipe

__all__ = ["kubernetes_manifests", "sbatch"]


def sbatch(recipe: Recipe, overrides: list[str], *, dry_run: bool) -> int:
    """``--sbatch``: the driver as a batch job, so no login shell has to stay open."""
    from pathlib import Path

    from nexrl.driver.cli.train import one_line
    from nexrl.driver.cluster.slurm import driver_script
    from nexrl.driver.cluster.slurm import sbatch as submit

    cfg = recipe.spec
    if cfg.cluster.type != "slurm":
        print(
            f"error: {recipe.path}: --sbatch runs the driver as a Slurm job: set cluster.type=slurm",
            file=sys.stderr,
        )
        return 2
    log_dir = recipe.output_dir / "logs" / "slurm"
    script = driver_script(
        cfg.cluster.slurm,
        experiment=cfg.experiment_name,
        recipe=str(Path(recipe.path).resolve()),
        overrides=overrides,
        log_dir=log_dir,
    )
    if dry_run:
        print(script, end="")
        return 0
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        job = submit(script, f"nexrl-{cfg.experiment_name}-driver")
    except NexrlError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    print(f"nexrl: submitted the driver as Slurm job {job}; output: {log_dir}/driver-{job}.out")
    print(
        f"nexrl: follow it with: tail -f {log_dir}/driver-{job}.out   stop it with: scancel {job}"
    )
    return 0


def kubernetes_manifests(recipe: Recipe) -> int:
    """``--dry-run`` of a Kubernetes run: its DaskCluster and DaskWorkerGroups as YAML
    (``kubectl apply -f`` accepts them), after checking them against the CRDs."""
    import yaml

    from nexrl.driver.cluster.kubernetes import manifests, validate_manifests

    cfg = recipe.spec
    docs = manifests(
        cfg.cluster.kubernetes,
        cfg.experiment_name,
        trainer_gpus=max(1, cfg.resource.trainer_gpus),
        trainer_ranks=cfg.trainer.world_size,
        inference=not cfg.service.inference_service.base_urls,
    )
    problems = validate_manifests(docs)
    if problems:
        print(f"error: {recipe.path}: cluster.kubernetes: {'; '.join(problems)}", file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0
