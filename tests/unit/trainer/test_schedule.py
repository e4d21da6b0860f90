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


def test_a_note_only_when_a_decaying_schedules_end_moved() -> None:
    from types import SimpleNamespace

    from nexrl.trainer.schedule import schedule_change_note

    cfg = SimpleNamespace(lr=1e-3, lr_scheduler="linear", warmup_steps=0, ppo_epochs=1)
    assert schedule_change_note(10, 10, 5, cfg) is None  # same end
    assert schedule_change_note(None, 10, 5, cfg) is None  # an older checkpoint: unknown
    assert (
        schedule_change_note(
            10, 20, 5, SimpleNamespace(**{**vars(cfg), "lr_scheduler": "constant"})
        )
        is None
    )
    # linear: 1 - 5/10 = 0.5 -> 1 - 5/20 = 0.75 of 1e-3
    note = schedule_change_note(10, 20, 5, cfg)
    assert note is not None and "(0.0005 -> 0.00075)" in note and "from step 6" in note
