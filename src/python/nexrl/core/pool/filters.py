"""Dynamic sampling filters (DAPO): drop groups that carry no learning signal."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["zero_variance_group_mask"]


def zero_variance_group_mask(
    rewards: Tensor, group_ids: Tensor, *, atol: float = 0.0
) -> tuple[Tensor, dict[str, float]]:
    """Keep mask [B] that drops every group whose rewards are all equal.

    A group is dropped when ``max_g(r) - min_g(r) <= atol`` (exact equality by
    default); singleton groups are therefore dropped too. Per-group max / min are
    scatter reductions over group ids mapped to ``0..G-1`` (no Python loop).

    Returns ``(keep, metrics)`` with metrics ``dropped_group_frac`` (dropped groups
    / groups), ``dropped_traj_frac`` (dropped trajectories / trajectories),
    ``num_groups`` and ``num_kept_groups``; fractions are 0 for an empty batch.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be [B], got shape {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_ids shape {tuple(group_ids.shape)} != rewards {tuple(rewards.shape)}"
        )
    if atol < 0:
        raise ValueError(f"atol must be >= 0, got {atol!r}")
    batch = rewards.numel()
    if batch == 0:
        keep = torch.zeros(0, dtype=torch.bool, device=rewards.device)
        return keep, {
            "dropped_group_frac": 0.0,
            "dropped_traj_frac": 0.0,
            "num_groups": 0.0,
            "num_kept_groups": 0.0,
        }
    values = rewards.to(torch.float64)
    uniq, group = torch.unique(group_ids.to(rewards.device), return_inverse=True)
    num_groups = len(uniq)
    empty = torch.empty(num_groups, dtype=torch.float64, device=values.device)
    gmax = empty.scatter_reduce(0, group, values, reduce="amax", include_self=False)
    gmin = empty.scatter_reduce(0, group, values, reduce="amin", include_self=False)
    keep_group = (gmax - gmin) > atol
    keep = keep_group[group]
    kept_groups = int(keep_group.sum().item())
    return keep, {
        "dropped_group_frac": 1.0 - kept_groups / num_groups,
        "dropped_traj_frac": 1.0 - int(keep.sum().item()) / batch,
        "num_groups": float(num_groups),
        "num_kept_groups": float(kept_groups),
    }
