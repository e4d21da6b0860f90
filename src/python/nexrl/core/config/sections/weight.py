"""``weight``: publishing snapshots and syncing inference."""

from __future__ import annotations

from dataclasses import dataclass

from nexrl.core.config.fields import cfg_field


@dataclass
class WeightConfig:
    sync_mode: str = cfg_field(
        "sync",
        help="'sync': rollouts wait for every update; 'batch-async': rollouts continue up to "
        "staleness_threshold versions behind; 'fully-async': weights are pushed while "
        "rollouts continue.",
        choices=("sync", "batch-async", "fully-async"),
    )
    staleness_threshold: int | None = cfg_field(
        None, help="Max policy-version lag of trained data (required for batch-async).", minimum=0
    )
    sync_every: int = cfg_field(1, help="Publish a snapshot every N steps.", minimum=1)
    snapshot_dir: str = cfg_field(
        "${output_dir}/snapshots", help="Where snapshots vN/ are published."
    )
    keep_snapshots: int = cfg_field(3, help="Snapshots kept on disk (older are pruned).", minimum=1)
    handoff: str = cfg_field(
        "auto",
        help="How new weights reach inference at each sync. 'files': the trainer publishes "
        "the snapshot and the server reloads it. 'memory': trainer rank 0 copies them into "
        "a buffer shared with the server (/dev/shm on the CPU; CUDA IPC on a GPU, embedded "
        "server only) and the server copies them from there: the embedded server, or vLLM "
        "through its own weight-update API with nexrl's engine (build-support/vllm.sh "
        "serve); the snapshot is still written, behind the next step. 'auto': memory when "
        "the server is on the same host (and CUDA device) as trainer rank 0 and the run "
        "is not LoRA, else files. A failed memory handoff logs one warning and uses files "
        "for the rest of the run.",
        choices=("auto", "files", "memory"),
    )
