"""``trajectory_pool``: where trajectories are stored and how they are batched for training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexrl.core.config.fields import cfg_field

__all__ = [
    "BATCH_READINESS_CHOICES",
    "GROUP_TIMEOUT_ACTIONS",
    "META_KEY_PREFIXES",
    "SCALAR_KEYS",
    "TrajectoryPoolConfig",
]

BATCH_READINESS_CHOICES = ("batch_size_reached", "loaded_batch_finished", "both")
GROUP_TIMEOUT_ACTIONS = ("release", "drop")
SCALAR_KEYS = ("group_id", "run_id", "policy_version")
META_KEY_PREFIXES = ("extra_info.", "data_item.", "metrics.")


@dataclass
class TrajectoryPoolConfig:
    """The zarr trajectory pool shared by rollout workers (writers) and the trainer (reader)."""

    store: str = cfg_field(
        "${output_dir}/pool.zarr",
        help="Where the pool lives: a local folder (default, inside the run's output "
        "folder) or any fsspec URL (a path on NFS/GPFS, s3://bucket/run/pool.zarr, ...). "
        "Every rollout worker and the trainer must be able to reach it.",
    )
    storage_options: dict[str, Any] = cfg_field(
        help="Options passed to fsspec for a URL store (e.g. endpoint_url, profile); "
        "put secrets in the environment with ${oc.env:VAR}, not in the recipe.",
        default_factory=dict,
    )
    batch_size: int = cfg_field(
        32,
        help="Trajectories per training batch (batch_size_reached / both). With grouping "
        "it must be a multiple of rollout_worker.group_size: batches are made of whole groups.",
        minimum=1,
    )
    key_list: list[str] = cfg_field(
        help="Keys that group trajectories into groups of rollout_worker.group_size: [] = no "
        "grouping; one key (e.g. [group_id]); "
        "several keys group by their combination. A key is one of group_id, run_id, "
        "policy_version or a path into the trajectory's JSON: extra_info.<name>, "
        "data_item.<name>, metrics.<name>.",
        default_factory=list,
    )
    batch_readiness: str = cfg_field(
        "batch_size_reached",
        help="When a batch is ready: 'batch_size_reached' = complete groups hold >= "
        "batch_size trajectories (a batch of batch_size is returned); "
        "'loaded_batch_finished' = the controller reports the loaded data batch fully "
        "rolled out (every complete group is returned); 'both' = both conditions.",
        choices=BATCH_READINESS_CHOICES,
    )
    group_timeout_s: float = cfg_field(
        600.0,
        help="Seconds after a group's first trajectory arrived before a group that never "
        "filled (failed or straggling rollouts) stops waiting; see group_timeout_action.",
        minimum=0,
    )
    group_timeout_action: str = cfg_field(
        "release",
        help="What happens to a timed-out group: 'release' = train on it as a short group; "
        "'drop' = discard it. Either way it is counted in the pool stats.",
        choices=GROUP_TIMEOUT_ACTIONS,
    )
    max_staleness: int | None = cfg_field(
        None,
        help="Drop (and count) groups containing a trajectory generated more than this "
        "many policy versions before the trainer's current version; null = keep all and "
        "only report the version lag.",
        minimum=0,
    )
    consumer: str = cfg_field(
        "trainer",
        help="Name of the consumer cursor stored in the pool; each name receives every "
        "trajectory exactly once. Only one process may consume under a name at a time.",
    )
    poll_interval_s: float = cfg_field(
        0.5,
        help="Seconds between checks for new trajectories while waiting for a batch.",
        minimum=0,
    )
    tag_weight_sync: bool = cfg_field(
        True,
        help="Writers check the pool's weight-sync flag at every append and tag the "
        "trajectories committed during a sync (they are kept, never re-rolled out).",
    )
    fsync: bool = cfg_field(
        False,
        help="fsync every data chunk and commit marker before it counts as written, so "
        "commits also survive a machine crash (power loss) on a local disk; off, they "
        "survive any process being killed. Consumer cursors are always fsync'ed.",
    )
    chunking: dict[str, Any] = cfg_field(
        help="Advanced: override chunk sizes / compression of new segments (row_chunk, "
        "token_chunk, meta_chunk, metric_chunk, codec, clevel, shuffle); the measured "
        "defaults and why are in docs/pool.md.",
        default_factory=dict,
    )
