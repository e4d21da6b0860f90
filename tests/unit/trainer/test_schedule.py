"""LR schedules: the documented formulas."""

from __future__ import annotations

import itertools
import math

import pytest

from nexrl.trainer.schedule import lr_factor, lr_lambda


def test_warmup_then_constant() -> None:
    assert [lr_factor(s, "constant", 4, 10) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_linear_decays_to_zero_at_total() -> None:
    f = [lr_factor(s, "linear", 2, 10) for s in range(11)]
    assert f[:2] == [0.5, 1.0]
    assert f[2] == 1.0 and f[6] == pytest.approx(0.5) and f[10] == 0.0
    assert all(a >= b for a, b in itertools.pairwise(f[2:]))


def test_cosine_halfway_is_half() -> None:
    assert lr_factor(0, "cosine", 0, 10) == 1.0
    assert lr_factor(5, "cosine", 0, 10) == pytest.approx(0.5)
    assert lr_factor(10, "cosine", 0, 10) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(20, "cosine", 0, 10) == pytest.approx(0.5 * (1 + math.cos(math.pi)))


def test_unknown_schedule_is_named() -> None:
    with pytest.raises(ValueError, match=r"'cosin'.*constant, linear, cosine"):
        lr_lambda("cosin", 0, 10)
