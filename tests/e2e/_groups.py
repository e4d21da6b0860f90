"""Which prompt groups a finished (or resumed) run trained: none lost, none twice.

Read from the run folder only: the controller's record in the checkpoint of the last
step (``trained``/``trained_ranges``: the groups trained, ``pending``: groups in
flight), the pool (what was committed, what was delivered) and ``metrics.jsonl``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nexrl.driver.controller.setup import data_config
from nexrl.driver.controller.state import ControllerState, committed_group_ids
from nexrl.driver.data import DataLoader
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, overrides, train_rows
from tests.e2e.test_train_run import delivered_pairs, pool_of


def group_record(out: Path, step: int, group_size: int = 8) -> dict[str, Any]:
    """``lost``: groups the data loader handed out (it hands them out in the data order,
    so every group up to the last one seen anywhere) that were neither trained, nor in
    flight, nor committed and waiting in the pool at the end, plus any delivered but
    not trained; ``duplicated``: trajectories trained beyond one copy per (group,
    sample), in groups; ``trained``: the groups trained."""
    rows = train_rows(out)
    state = torch.load(
        out / "checkpoints" / f"step_{step}" / "trainer_state.pt", weights_only=False
    )["extra"]["controller"]
    trained = ControllerState(**state).trained_ids()
    pending = {int(item["group_id"]) for group in state["pending"] for item in group}
    committed = committed_group_ids(pool_of(out))
    delivered = {g for g, _ in delivered_pairs(out)}
    waiting = committed - delivered  # in the pool, not handed to the trainer yet
    loader = DataLoader(data_config(load_recipe_checked(RECIPE, overrides(out))))
    order: list[int] = []  # the data order, one group at a time as a run takes them
    seen = trained | pending | committed
    while not seen <= set(order):
        batch = loader.next_batch(1)
        assert batch, f"groups not in the data order: {sorted(seen - set(order))[:10]}"
        order.append(int(batch[0][0]["group_id"]))
    lost = (set(order) - trained - pending - waiting) | (delivered - trained)
    trajectories = sum(int(r["batch/size"]) for r in rows)
    return {
        "lost": sorted(lost),
        "duplicated": (trajectories - group_size * len(trained)) / group_size,
        "trained": trained,
        "in_flight_at_end": len(pending | waiting),
        "counters": dict(state["counters"]),
    }


def assert_each_step_and_group_once(out: Path, steps: int, groups_per_step: int = 4) -> None:
    """After a stop and a resume: each step logged once, the trainer's version rising by
    one per step, every trajectory delivered once across both runs, and the trained
    groups exactly the first ``steps x groups_per_step`` of the data order (nothing
    skipped, nothing trained twice)."""
    from tests.e2e.test_kill_and_resume import expected_group_ids

    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert [r["version/trainer"] for r in rows] == list(range(1, steps + 1))
    pairs = delivered_pairs(out)
    assert len(pairs) == steps * groups_per_step * 8 and len(set(pairs)) == len(pairs)
    assert {g for g, _ in pairs} == expected_group_ids(out, steps * groups_per_step)
