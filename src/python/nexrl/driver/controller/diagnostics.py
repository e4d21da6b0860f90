"""The one line that stops a run whose cause is known (the Dask scheduler gone, a full
disk, a failed trainer rank, no rollout worker left), each with how to resume."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nexrl.core.util.disk import free_bytes, human_bytes, no_space_left

if TYPE_CHECKING:
    from nexrl.driver.controller.components import Components

__all__ = ["StopDiagnosis"]


@dataclass(frozen=True)
class StopDiagnosis:
    """Where the run stands when something stops it: its running ``parts``, the last
    step trained and the step of its last checkpoint (-1: none yet)."""

    parts: Components
    step: int
    last_checkpoint_step: int

    def message_for(self, exc: Exception, trainer_error: type) -> str | None:
        """The one line that stops the run for ``exc`` when its cause is known: the Dask
        scheduler gone, a full disk, a trainer rank failed; None for anything else."""
        if self.parts.cluster.scheduler_lost():
            return self.scheduler_lost()
        full = no_space_left(exc, self.written_folders())
        if full is not None:
            return self.disk_full(full)
        if isinstance(exc, trainer_error):  # a rank failed or its worker died mid-run
            return self.trainer_stopped(exc)
        from nexrl.driver.controller.silent_workers import NoWorkerLeft

        if isinstance(exc, NoWorkerLeft):
            return (
                f"{exc}; the run stopped at step {self.step + 1}; then run the same command "
                f"again to resume {self.resume_hint()}"
            )
        return None

    def resume_hint(self) -> str:
        """Where a rerun resumes: the checkpoint a resume picks on disk (a save whose
        reply was lost with a dying worker may have completed)."""
        step = max(self.last_checkpoint_step, self.parts.run.checkpoint_step())
        if step > 0:
            return f"from its checkpoint of step {step}"
        return "from the start (no checkpoint was written yet: see trainer.save_every)"

    def trainer_stopped(self, exc: Any) -> str:
        """The one line that stops a run whose trainer failed: which ranks (and, on
        Slurm, their jobs), what happened, and how to resume."""
        jobs = self.parts.cluster.job_ids().get("trainer", [])
        ranks = getattr(self.parts, "ranks", None) or []
        nodes = [r.get("slurm_node") if isinstance(r, dict) else None for r in ranks]

        def on(r: int) -> str:  # the rank's node, as its job reported it (several nodes)
            return f" on node {nodes[r]}" if r < len(nodes) and nodes[r] else ""

        where = ", ".join(
            f"rank {r} (Slurm job {jobs[r]}{on(r)})" if r < len(jobs) else f"rank {r}"
            for r in exc.ranks
        )
        return (
            f"the trainer failed{' on ' + where if where else ''} at step {self.step + 1}: {exc}; "
            f"run the same command again to resume {self.resume_hint()}"
        )

    def scheduler_lost(self) -> str:
        cluster = self.parts.cluster
        if cluster.cluster is None:  # cluster.type=address: the user runs the scheduler
            restart = (
                "start a scheduler and its workers again (the new address in cluster.address), "
                "then run the same command"
            )
        else:
            restart = "run the same command again"
        return (
            f"the Dask scheduler at {cluster.address} is gone (lost at step {self.step + 1}; "
            f"its workers and the trainer on them with it); {restart} to resume "
            f"{self.resume_hint()}"
        )

    def written_folders(self) -> list[Path]:
        """Where the run writes: the fullest of them is named when a write fails."""
        parts = self.parts
        folders = [parts.run.root, parts.run.checkpoints, parts.snapshot_dir]
        if "://" not in str(parts.pool.url):  # a local pool store (not an fsspec URL)
            folders.append(Path(str(parts.pool.url)))
        return folders

    def disk_full(self, path: Path) -> str:
        free = free_bytes(path)
        left = f" ({human_bytes(free)} free)" if free is not None else ""
        return (
            f"no space left on device: {path}{left}; the run stopped after step {self.step}; "
            f"free some space there (earlier checkpoints and the pool are kept), then run "
            f"the same command again to resume {self.resume_hint()}"
        )
