"""End-to-end on a real (one-node) Slurm: the default recipe with ``cluster.type=slurm``.

Rollout workers, two trainer ranks (data-parallel, gloo) and the embedded
inference server each run in Slurm jobs the run submits; a rollout job is
``scancel``-ed mid-run; the run finishes, the reward rises, every group is
trained exactly once, and no job is left in ``squeue``."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from statistics import mean

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests.e2e._recipe import RECIPE, train_rows
from tests.e2e.test_kill_and_resume import assert_pool_record_matches, wait_for_step
from tests.integration.slurm._slurm import SLURM_RUN, require_slurm, squeue, wait_gone

STEPS = 30


def slurm_overrides(out: Path) -> list[str]:
    return [
        f"output_dir={out}",
        f"trainer.total_train_steps={STEPS}",
        "trainer.save_every=0",
        "trainer.world_size=2",
        "validate.validate_before_train=false",
        "validate.every=0",
        "cluster.dashboard_address=127.0.0.1:0",
        *SLURM_RUN,
        "runtime_monitor.health_check_interval_s=1",
    ]


def test_default_recipe_learns_on_slurm_with_every_part_in_its_own_job(tmp_path: Path) -> None:
    require_slurm()
    out = tmp_path / "run"
    controller = Controller(load_recipe_checked(RECIPE, slurm_overrides(out)), progress=False)
    cancelled: list[str] = []

    def scancel_a_rollout_job() -> None:
        wait_for_step(out, 5)
        c = controller.components
        assert c is not None
        victim = c.cluster.job_ids()["rollout"][0]
        subprocess.run(["scancel", victim], check=True)
        cancelled.append(victim)

    thread = threading.Thread(target=scancel_a_rollout_job, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=10)
    assert cancelled, "no rollout job was cancelled"
    assert result.steps == STEPS

    record = json.loads((out / "cluster.json").read_text())
    jobs = record["slurm_jobs"]
    # Each part ran inside its own job, as each reports from there.
    ranks = record["trainer_ranks"]
    assert sorted(r["slurm_job_id"] for r in ranks) == sorted(jobs["trainer"])
    assert len(set(jobs["trainer"])) == 2
    assert record["inference"]["slurm_job_id"] == jobs["inference"][0]
    rollout_ids = set(record["rollout_workers"].values())
    assert rollout_ids and rollout_ids <= set(jobs["rollout"]) | set(cancelled)
    assert not rollout_ids & set(jobs["trainer"] + jobs["inference"])

    rows = train_rows(out)
    rewards = [r["reward/mean"] for r in rows]
    # 30 steps of the default recipe on 2 cores: ~0.02 -> ~0.09 (5-step means), measured
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.04, rewards
    # The cancelled job's groups were rolled out again: each trained group whole, once.
    trained = sum(r["batch/size"] for r in rows)
    assert trained == 8 * len(controller.scheduler.trained)
    # A re-run task's second copies are dropped by the pool before a batch is picked
    # (counted, status 2); any the scheduler still saw were delivered and not trained.
    delivered = rows[-1]["pool/delivered_total"]
    assert delivered - trained == controller.counters.duplicate_trajectories_dropped
    assert_pool_record_matches(out, rows)
    # Every job the run submitted is gone (the replacement rollout job included).
    all_ids = [i for ids in jobs.values() for i in ids]
    assert wait_gone(all_ids) == {}
    assert squeue([]) == {} or not any(name.startswith("nexrl-") for name in _queued_names()), (
        "a nexrl job is still queued"
    )


def _queued_names() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True)
    return out.stdout.split()
