"""Dynamic sampling that never finds an informative group (an evaluator giving every
answer the same reward) stops with one line naming the fields, instead of rolling out
forever with nothing on the terminal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from nexrl.controller import Controller, ControllerError


def _controller(filtered: int, *, filter_on: bool = True, mark: int = 0) -> Controller:
    controller = Controller.__new__(Controller)
    controller.cfg = OmegaConf.create({"algorithm": {"max_extra_sampling_rounds": 4}})
    pool = SimpleNamespace(
        config=SimpleNamespace(filter_zero_variance=filter_on),
        cursor=SimpleNamespace(counters={"filtered_groups": filtered}),
    )
    parts = SimpleNamespace(pool=pool, groups_per_batch=8)
    controller.components = parts  # type: ignore[assignment]
    controller._filtered_mark = mark
    controller.step = 6
    return controller


def test_four_times_the_extra_rounds_filtered_without_a_batch_stops_the_run() -> None:
    _controller(127)._check_not_all_filtered()  # 4 x 4 rounds x 8 groups = 128: not yet
    _controller(1000, mark=940)._check_not_all_filtered()  # counted from the last batch
    _controller(1000, filter_on=False)._check_not_all_filtered()
    with pytest.raises(ControllerError) as err:
        _controller(128)._check_not_all_filtered()
    message = str(err.value)
    assert message.startswith("dynamic sampling: step 7 found no group with different rewards")
    assert "algorithm.filter_zero_variance_groups" in message
    assert "algorithm.max_extra_sampling_rounds (now 4)" in message
    assert "\n" not in message
