"""``version_metrics``: the step row's straddle count and token-lag shares, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from nexrl.core.pool import TrajectoryColumns
from nexrl.driver.metrics.staleness import version_metrics


def columns(first: list[int], last: list[int], lens: list[int]) -> TrajectoryColumns:
    n, total = len(lens), sum(lens)
    return TrajectoryColumns.from_arrays(
        prompt_ids=np.ones(n, np.int64),
        prompt_lens=np.ones(n, np.int64),
        response_ids=np.ones(total, np.int64),
        loss_mask=np.ones(total, np.int8),
        logprobs=np.zeros(total, np.float32),
        response_lens=np.asarray(lens),
        reward=np.zeros(n, np.float32),
        group_id=np.arange(n),
        policy_version=np.asarray(first),
        policy_version_last=np.asarray(last),
    )


def test_straddles_and_token_shares_by_hand() -> None:
    # the step trains policy 5: lags 0, 1, 2 and 4 (oldest tokens), 10 tokens in all
    cols = columns(first=[5, 4, 3, 1], last=[5, 5, 3, 2], lens=[1, 2, 3, 4])
    got = version_metrics(cols, version_before=5)
    assert got["version/straddled"] == 2  # the second and the fourth went on after an update
    assert got["version/tokens_lag_0"] == pytest.approx(1 / 10)
    assert got["version/tokens_lag_1"] == pytest.approx(2 / 10)
    assert got["version/tokens_lag_2plus"] == pytest.approx(7 / 10)


def test_the_pool_refuses_a_last_version_older_than_the_first() -> None:
    from nexrl.core.pool import PoolDataError

    with pytest.raises(PoolDataError, match="policy_version_last"):
        columns(first=[3], last=[2], lens=[1])
