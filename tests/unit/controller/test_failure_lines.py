"""The driver's warnings about failed rollout futures: one line per future and error
(a task of 8 groups that hung is one line naming them, not 8)."""

from __future__ import annotations

import logging

import pytest

from nexrl.driver.controller.failures import TaskFailure, warn_failures


def test_a_tasks_groups_that_failed_together_are_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung = "still running after runtime_monitor.task_timeout_s=20s; cancelled"
    failures = [
        TaskFailure("evaluator", "evaluate-g0+7-train-1", g, "train", hung) for g in range(8)
    ]
    failures.append(TaskFailure("rollout", "rollout-g9-train-2", 9, "train", "ValueError: bad"))
    failures += [
        TaskFailure("evaluator", "evaluate-g10+3-train-3", g, "train", "KeyError: 'x'")
        for g in (10, 11, 13)
    ]
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.controller.failures"):
        warn_failures(failures)
    assert [r.getMessage() for r in caplog.records] == [
        f"evaluator future evaluate-g0+7-train-1 (groups 0-7): {hung}",
        "rollout future rollout-g9-train-2 (group 9): ValueError: bad",
        "evaluator future evaluate-g10+3-train-3 (groups 10-11, 13): KeyError: 'x'",
    ]
