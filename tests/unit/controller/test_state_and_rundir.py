"""Controller checkpoint state and the run folder's resume policy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.types import Trajectory
from nexrl.driver.controller.rundir import RunDir, RunDirError
from nexrl.driver.controller.state import ControllerState, committed_group_ids
from nexrl.driver.modeling.prepare import ModelSetupError, prepare_model
from nexrl.driver.recipe import Recipe, load_recipe_checked

RECIPE = "recipes/max_digit/max_digit_tiny.yaml"


def test_state_round_trips_through_the_checkpoint_extra_state() -> None:
    items = [{"group_id": 7, "run_id": r, "data_item": {"prompt": "max 1 2 3"}} for r in range(2)]
    state = ControllerState(
        step=4, loader={"epoch": 0, "position": 9}, pool={"generation": 5}, pending=[items]
    )
    back = ControllerState.from_extra_state(state.to_extra_state())
    assert back == state
    assert ControllerState.from_extra_state({}) is None


def _traj(group: int, run: int) -> Trajectory:
    return Trajectory([1, 2], [3], [1], [-0.5], 1.0, group_id=group, run_id=run)


def test_committed_group_ids_lists_what_is_in_the_pool(tmp_path: Path) -> None:
    cfg = PoolConfig(store=str(tmp_path / "pool.zarr"), key_list=["group_id"])
    pool = TrajectoryPool(cfg)
    assert committed_group_ids(pool) == set()
    pool.writer().append([_traj(3, 0), _traj(3, 1)])
    pool.writer().append([_traj(11, 0)])
    assert committed_group_ids(pool) == {3, 11}


def _recipe(out: Path, mode: str) -> Recipe:
    return load_recipe_checked(RECIPE, [f"output_dir={out}", f"resume.mode={mode}"])


def test_fresh_run_refuses_a_folder_holding_a_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.prepare(_recipe(run.root, "disable"), str(run.root / "pool.zarr"))
    assert (run.root / "config.yaml").exists() and run.logs.is_dir()
    (run.root / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=r"resume\.mode=auto"):
        run.prepare(_recipe(run.root, "disable"), str(run.root / "pool.zarr"))
    assert (run.root / "metrics.jsonl").read_text() == '{"step": 1}\n'  # untouched


def test_auto_without_a_checkpoint_keeps_the_old_data_aside(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    (run.root / "pool.zarr").mkdir(parents=True)
    (run.root / "pool.zarr" / "marker").write_text("old")
    (run.root / "metrics.jsonl").write_text('{"step": 1}\n')
    run.prepare(_recipe(run.root, "auto"), str(run.root / "pool.zarr"))
    (kept,) = run.root.glob("abandoned-*")
    assert (kept / "pool.zarr" / "marker").read_text() == "old"
    assert (kept / "metrics.jsonl").exists()
    assert not (run.root / "pool.zarr").exists() and not (run.root / "metrics.jsonl").exists()


def test_checkpoint_step_is_the_newest_complete_checkpoint_on_disk(tmp_path: Path) -> None:
    """What a failed run's resume hint names (its save reply may have been lost)."""
    run = RunDir(tmp_path / "run")
    assert run.checkpoint_step() == 0
    for step, complete in ((5, True), (12, True), (20, False)):  # step_20: a save cut short
        folder = run.checkpoints / f"step_{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "meta.json").write_text("{}")
    assert run.checkpoint_step() == 12


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_holds_it(
    tmp_path: Path,
) -> None:
    first = RunDir(tmp_path / "run")
    release = first.lock()
    (first.root / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=rf"run is in use by another run \(pid {os.getpid()}\)"):
        RunDir(tmp_path / "run").lock()
    assert (first.root / "metrics.jsonl").read_text() == '{"step": 1}\n'  # untouched
    release()
    RunDir(tmp_path / "run").lock()()  # free again once the first one ended


def test_an_output_dir_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    run = RunDir(blocker / "run")
    with pytest.raises(RunDirError, match=r"output_dir .*afile/run: cannot write .*"):
        run.lock()
    with pytest.raises(RunDirError, match=r"output_dir .*afile/run: cannot write"):
        run.prepare(_recipe(run.root, "auto"), str(run.root / "pool.zarr"))
    assert blocker.read_text() == "not a folder"


def test_tiny_model_is_built_once_from_the_recipe(tmp_path: Path) -> None:
    spec = _recipe(tmp_path / "run", "disable").spec
    run = RunDir(tmp_path / "run")
    model, tok = prepare_model(spec, run.root)
    assert model == tok == run.root / "model" and (model / "config.json").exists()
    stamp = (model / "model.safetensors").stat().st_mtime_ns
    prepare_model(spec, run.root)
    assert (model / "model.safetensors").stat().st_mtime_ns == stamp


def test_model_path_without_config_json_is_a_clear_error(tmp_path: Path) -> None:
    spec = _recipe(tmp_path / "run", "disable").spec
    spec.model.path = str(tmp_path)
    with pytest.raises(ModelSetupError, match=r"model.path: .* has no config.json"):
        prepare_model(spec, tmp_path / "run")


def test_a_group_committed_twice_is_trained_from_one_copy(tmp_path: Path) -> None:
    # Dask runs futures at least once: an evaluator future re-run after its worker
    # died commits its group a second time. Both copies reach the pool.
    from nexrl.driver.controller import Controller

    cfg = PoolConfig(
        store=str(tmp_path / "pool.zarr"), key_list=["group_id"], group_size=2, batch_size=4
    )
    pool = TrajectoryPool(cfg)
    pool.writer().append([_traj(5, 0), _traj(5, 1)])
    pool.writer().append([_traj(5, 0), _traj(5, 1)])  # the re-run's copy
    batch = pool.get_batch()
    assert batch is not None and len(batch) == 4
    controller = Controller(load_recipe_checked(RECIPE, [f"output_dir={tmp_path / 'run'}"]))
    kept = controller.scheduler.first_copies(batch)
    assert [(t.group_id, t.run_id) for t in kept] == [(5, 0), (5, 1)]
    assert controller.counters.duplicate_trajectories_dropped == 2
    # ... and a later batch carrying the group again is dropped whole.
    pool.writer().append([_traj(5, 0), _traj(5, 1), _traj(6, 0), _traj(6, 1)])
    later = pool.get_batch()
    assert later is not None
    assert [(t.group_id, t.run_id) for t in controller.scheduler.first_copies(later)] == [
        (6, 0),
        (6, 1),
    ]


def test_the_run_counters_come_back_from_a_checkpoint_and_count_on() -> None:
    from nexrl.driver.controller.counters import RunCounters

    counters = RunCounters()
    counters.group_done(evaluator_errors=2)
    counters.group_failed()
    counters.group_retried(1.5)
    counters.duplicates_dropped(4)
    state = ControllerState(step=3, counters=counters.to_dict())
    back = ControllerState.from_extra_state(state.to_extra_state())
    assert back is not None
    resumed = RunCounters()
    resumed.restore({**back.counters, "a_counter_of_a_newer_version": 9.0})
    assert resumed == counters
    resumed.group_done(evaluator_errors=0)
    assert (resumed.groups_rolled_out, resumed.evaluator_errors) == (2, 2)
    assert isinstance(resumed.failed_groups, int) and resumed.retry_backoff_s == 1.5
