"""How old the tokens a step trains on are, and how many requests straddled an update.

A trajectory carries the oldest policy version that may have produced one of its
tokens (``policy_version``: staleness is counted from it) and the newest
(``policy_version_last``). With partial rollouts (``weight.sync_mode=fully-async``
on vLLM, whose ``/pause?mode=keep`` lets requests in flight go on with the new
weights) the two differ for a request that straddled an update. Per step:

* ``version/straddled``: trajectories whose request straddled at least one update
  (``policy_version_last > policy_version``);
* ``version/tokens_lag_0``, ``version/tokens_lag_1``, ``version/tokens_lag_2plus``:
  the share of the step's response tokens whose oldest possible version is 0, 1,
  or 2 and more versions behind the policy the step trains (``version_before``).
  A straddling request's tokens count at its oldest version: staleness is never
  underestimated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["version_metrics"]


def version_metrics(columns: Any, version_before: int) -> dict[str, float]:
    """The step's straddle count and token-lag shares (see the module doc)."""
    first = np.asarray(columns.policy_version, dtype=np.int64)
    last = np.asarray(columns.policy_version_last, dtype=np.int64)
    tokens = np.asarray(columns.response_lens, dtype=np.float64)
    lag = np.clip(version_before - first, 0, 2)
    share = np.bincount(lag, weights=tokens, minlength=3) / max(float(tokens.sum()), 1.0)
    return {
        "version/straddled": float((last > first).sum()),
        "version/tokens_lag_0": float(share[0]),
        "version/tokens_lag_1": float(share[1]),
        "version/tokens_lag_2plus": float(share[2]),
    }
