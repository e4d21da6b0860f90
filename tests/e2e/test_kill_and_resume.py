"""End-to-end: processes die (a rollout worker, the driver itself) or the user presses
Ctrl-C; the run finishes or resumes with nothing lost and nothing trained twice."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from nexrl.core.weights.checkpoint import CheckpointManager, is_complete
from nexrl.driver.controller import Controller
from nexrl.driver.controller.setup import data_config
from nexrl.driver.data import DataLoader
from nexrl.driver.recipe import load_recipe_checked
from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows
from tests.e2e.test_train_run import delivered_pairs, pool_of, processes_using

DEADLINE_S = 600  # generous bound for a slow CI machine; a hang fails instead of blocking


def assert_pool_record_matches(out: Path, rows: list[dict[str, Any]]) -> None:
    """The pool's delivery record (step per trajectory) is metrics.jsonl's: each step took
    ``batch/size`` trajectories of distinct groups, each group delivered once; the rest
    of the pool is pending or dropped (second copies of a group, counted)."""
    ds = pool_of(out).to_xarray().compute(scheduler="synchronous")  # not a test's cluster
    step, status, gid = ds["step"].values, ds["status"].values, ds["group_id"].values
    assert sorted(set(step[status == 1].tolist())) == [r["step"] for r in rows]
    for r in rows:
        took = gid[step == r["step"]]
        assert len(took) == r["batch/size"] and len(set(took.tolist())) == len(took) // 8
    assert len(gid[status == 1]) == 8 * len(set(gid[status == 1].tolist()))
    dropped = int((status == 2).sum())
    assert rows[-1]["rollout/duplicate_trajectories_dropped"] <= dropped  # (+ stale drops)


def wait_for_step(out: Path, step: int, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if any(r["step"] >= step for r in train_rows(out)):
            return
        if proc is not None and proc.poll() is not None:
            said = _stderr_tail(proc)
            raise AssertionError(f"the run exited early with code {proc.returncode}: {said}")
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached")


def _stderr_tail(proc: subprocess.Popen[Any]) -> str:
    """The end of what an exited run wrote to stderr (when the test piped it), for the
    failure message: CI shows only the message."""
    if proc.stderr is None:
        return "(stderr not captured)"
    try:
        return str(proc.stderr.read())[-3000:]
    except Exception as exc:  # already read, or closed
        return f"(stderr unreadable: {exc})"


def expected_group_ids(out: Path, n_groups: int) -> set[int]:
    """The first ``n_groups`` prompt groups of the recipe's data order."""
    recipe = load_recipe_checked(RECIPE, overrides(out))
    loader = DataLoader(data_config(recipe))
    return {int(g[0]["group_id"]) for g in loader.next_batch(n_groups)}


def test_killing_a_rollout_worker_mid_run_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = load_recipe_checked(RECIPE, overrides(out, steps=5))
    controller = Controller(recipe, progress=False)
    killed: list[int] = []

    def kill_one_worker() -> None:
        wait_for_step(out, 1)
        c = controller.components
        assert c is not None
        trainer_pid = c.trainer.setup_info()[0]["pid"]
        pids = c.cluster.client.run(os.getpid)
        victim = next(pid for pid in pids.values() if pid != trainer_pid)
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)

    thread = threading.Thread(target=kill_one_worker, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=10)
    assert killed, "no worker was killed"
    assert result.steps == 5
    rows = train_rows(out)
    # Every step trains a full batch of distinct whole groups, each group once: a group
    # that Dask committed twice (its evaluator future re-ran after the kill) is delivered
    # from one copy; the pool drops the other before it picks a batch, and fills the batch.
    assert [r["batch/size"] for r in rows] == [32] * 5
    assert 8 * len(controller.scheduler.trained) == 5 * 32 == rows[-1]["pool/delivered_total"]
    assert_pool_record_matches(out, rows)


def test_driver_killed_then_resumed_trains_every_group_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE]
    first = _launch.Popen(
        [*args, *overrides(out, "trainer.save_every=2", steps=6)],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_step(out, 3, first)  # checkpoint 2 is written, step 3 trained
        children = psutil.Process(first.pid).children(recursive=True)
        first.kill()  # SIGKILL: no cleanup code runs in the driver
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    # The embedded server and the Dask worker processes notice and exit by themselves.
    _, alive = psutil.wait_procs(children, timeout=60)
    assert alive == []
    # The kill lands after step 3 at the earliest; on a fast machine the run may have
    # finished checkpoint 4 by then. The resume must use the newest complete one.
    complete = [
        int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_*") if is_complete(p)
    ]
    assert complete and max(complete) in (2, 4), complete
    # ... and the resume starts from the one 'latest' names: the trainer's worker, left
    # on its own by the kill, may have renamed step_4 and been stopped before it moved
    # 'latest' (seen once on a loaded CI machine); that step_4 is passed over
    picked = CheckpointManager(out / "checkpoints").latest_verified()
    assert picked is not None and picked.name in ("step_2", "step_4"), picked
    resumed_at = int(picked.name.split("_")[1])

    def again() -> subprocess.CompletedProcess[str]:  # the same command, to its end
        return _launch.run(
            [*args, *overrides(out, "trainer.save_every=2", steps=6)],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )

    second = again()
    assert second.returncode == 0, second.stderr[-3000:]
    driver_log = (out / "logs" / "driver.log").read_text()
    assert "resumed from" in driver_log and f"at step {resumed_at} " in driver_log
    # metrics.jsonl: each step once (rows after the checkpoint were redone, not doubled).
    assert [r["step"] for r in train_rows(out)] == [1, 2, 3, 4, 5, 6]
    # The pool delivered each trajectory once across both runs, and the trained groups are
    # exactly the first 6 x 4 groups of the data order: nothing skipped, nothing repeated.
    pairs = delivered_pairs(out)
    assert len(pairs) == 6 * 32 and len(set(pairs)) == len(pairs)
    assert {g for g, _ in pairs} == expected_group_ids(out, 6 * 4)

    # The same command once more: the run is finished, so it says so and how to train on,
    # shows the summary again, and starts no cluster (no validation row added).
    metrics = (out / "metrics.jsonl").read_bytes()
    third = again()
    assert third.returncode == 0, third.stderr[-3000:]
    assert "finished at step 6 (trainer.total_train_steps=6): nothing to train" in third.stderr
    assert "raise trainer.total_train_steps" in third.stderr
    assert "steps: 6 (1 -> 6)" in third.stderr
    assert "Dask dashboard" not in third.stderr and "Traceback" not in third.stderr
    assert (out / "metrics.jsonl").read_bytes() == metrics


def _read_lines(stream: Any, into: list[str]) -> threading.Thread:
    """Collect a child's stream line by line while it runs (the test watches it)."""

    def read() -> None:
        for line in stream:
            into.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


@pytest.mark.parametrize(
    ("signum", "warm_parent", "again"),
    [
        (signal.SIGINT, "true", None),
        (signal.SIGTERM, "false", None),
        (signal.SIGINT, "true", "mashed"),
        (signal.SIGINT, "true", "after-the-stop-line"),
    ],
    ids=["ctrl-c", "sigterm-fresh-processes", "ctrl-c-mashed", "ctrl-c-while-shutting-down"],
)
def test_ctrl_c_checkpoints_and_exits_cleanly(
    tmp_path: Path, signum: signal.Signals, warm_parent: str, again: str | None
) -> None:
    """As a terminal's Ctrl-C (or ``timeout``'s SIGTERM) does: the signal goes to the
    driver's whole process group, not only to the driver; the run's workers and server
    must not die of it before the driver checkpoints (with the warm parent, and with
    every process spawned fresh). Ctrl-C pressed again and again (from 0.3 s after the
    first, or once the stop line is out, while the process shuts down) still exits 130
    in one line, and nothing is left running: in CI a Ctrl-C that landed in Python's
    own teardown killed the driver by the signal (-2, no line)."""
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *overrides(out, f"cluster.warm_parent={warm_parent}", steps=50),
    ]
    proc = _launch.Popen(
        args,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal gives a command
    )
    lines: list[str] = []
    reader = _read_lines(proc.stderr, lines)
    try:
        while not any(r["step"] >= 2 for r in train_rows(out)):
            assert proc.poll() is None, f"exited early: {''.join(lines)[-3000:]}"
            time.sleep(0.2)
        os.killpg(proc.pid, signum)
        if again == "mashed":
            time.sleep(0.3)
        deadline = time.monotonic() + 120
        while again == "after-the-stop-line" and not any("nexrl: stopped" in x for x in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.01)
        while again and proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):  # it exited in the meantime
                os.killpg(proc.pid, signum)
            time.sleep(0.05)
        proc.wait(timeout=120)
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    if again:  # a Ctrl-C mid-close ends the driver at once; what it started ends with it
        _, alive = psutil.wait_procs(processes_using(out), timeout=60)
        assert alive == [], alive
        # (a worker may still say that the scheduler is gone, after the driver's line)
        ours = [line for line in err.splitlines() if line.startswith("nexrl: stopped")]
        assert ours[-1].endswith("run the same command to resume"), err[-3000:]
        return
    assert processes_using(out) == []
    # resume.mode=auto is the default: the same command resumes, and the line says so
    (stop,) = [line for line in err.splitlines() if f"stopped by {signum.name}" in line]
    assert stop.endswith("(checkpointed); run the same command to resume"), stop
    assert "resume.mode" not in err, err[-3000:]
    reached = train_rows(out)[-1]["step"]
    assert reached >= 2
    assert is_complete(out / "checkpoints" / f"step_{reached}")


def test_ctrl_c_with_groups_in_flight_then_resume_of_whole_loaded_batches(
    tmp_path: Path,
) -> None:
    """The openai_agent recipe (per-call trajectories, ``loaded_batch_finished``) in
    fully-async: the next batch's groups are in flight while a step trains, and after
    Ctrl-C they reach the pool while the run stops. The resume must not wait for them:
    it did, for good ('step N: waiting 841s for a batch: 0 trajectories in flight')."""
    out = tmp_path / "run"

    def command(steps: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "nexrl.driver.cli.train",
            "recipes/openai_agent/openai_agent_tiny.yaml",
            *overrides(out, "weight.sync_mode=fully-async", steps=steps),
        ]

    first = _launch.Popen(
        command(50),
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_step(out, 3, first)
        os.killpg(first.pid, signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err[-3000:]
    reached = train_rows(out)[-1]["step"]
    second = _launch.run(
        command(reached + 2),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,  # the hang: a TimeoutExpired
    )
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = [
        line
        for line in (out / "logs" / "driver.log").read_text().splitlines()
        if f"at step {reached} " in line and "groups were in flight" in line
    ]
    assert resumed and " 0 groups were in flight" not in resumed[-1], resumed  # the case
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, reached + 3))
    # The staleness accounting survives the resume (AReaL #1388 counted it from a
    # version reset to 0): versions go on from the checkpoint's, and the trajectories
    # rolled out before the stop are as old as they are, never fresher.
    for r in rows:
        assert r["version/trainer"] == r["step"], r
        assert r["version/rollout_max"] <= r["step"] - 1, r
        assert r["version/lag_max"] == r["step"] - 1 - r["version/rollout_min"], r
        assert r["version/lag_max"] >= 0, r
        shares = [r[f"version/tokens_lag_{k}"] for k in ("0", "1", "2plus")]
        assert abs(sum(shares) - 1.0) < 1e-6, r
    assert processes_using(out) == []
