"""Resume after resume (issue 48, item 3): the default recipe at the e2e size, stopped
``NEXRL_RESUMES`` times in a row (CI: 2; 50 with ``NEXRL_BENCH_LONG=1``) at seeded
random points, each time by
Ctrl-C to the driver's process group (it checkpoints; exit 130) or ``kill -9`` of the
driver alone (its workers and server exit by themselves; the checkpoint of every step,
``trainer.save_every=1``, is what the resume has), and resumed by the same command
until it finishes, beside the same recipe run once without a stop (the baseline).

Asserted, as a user relies on them: every step logged once; every group of the data
order trained once, none lost (``tests/e2e/_groups.py``); the learning-rate schedule
and the data order continuous: each step's ``actor/lr`` and trained prompt groups equal
the uninterrupted run's. Recorded: the seconds of the chain and of the baseline, the
stops by kind. The 50-stop chain is long (~1.7 min a stop on the 2-core VM); CI's
2 stops (a Ctrl-C, then a kill -9) take ~4 min with the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests import _launch
from tests.e2e._groups import group_record
from tests.e2e._recipe import RECIPE, overrides, subprocess_env, train_rows
from tests.e2e.test_train_run import delivered_pairs, processes_using

LONG = os.environ.get("NEXRL_BENCH_LONG") == "1"
RESUMES = int(os.environ.get("NEXRL_RESUMES", "50" if LONG else "2"))
# seed 2: Ctrl-C then kill -9 in CI's 2 stops; 0 for the 50-stop chain (as recorded)
SEED = int(os.environ.get("NEXRL_RESUMES_SEED", "0" if LONG else "2"))
STEPS = 2 * RESUMES + 10  # cosine LR over the whole run: every step's lr differs
DEADLINE_S = 600


def _command(out: Path) -> list[str]:
    return [
        sys.executable, "-m", "nexrl.driver.cli.train", RECIPE,
        *overrides(out, "trainer.save_every=1", "trainer.lr_scheduler=cosine", steps=STEPS),
    ]  # fmt: skip


def _last(out: Path) -> int:
    rows = train_rows(out)
    return int(rows[-1]["step"]) if rows else 0


def _stop_once(out: Path, rng: random.Random, log: Path) -> str | None:
    """Start the command, let it train 1-2 more steps, stop it; the kind of stop, or None
    when the run finished first."""
    start = _last(out)
    target = start + rng.randint(1, 2)
    kind = rng.choice(("ctrl-c", "kill -9"))
    with open(log, "a") as console:
        proc = _launch.Popen(
            _command(out), env=subprocess_env(), stdout=console, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, as a terminal gives a command
        )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        while _last(out) < target and proc.poll() is None:
            assert time.monotonic() < deadline, f"no step {target} in {DEADLINE_S} s"
            time.sleep(0.05)
        if proc.poll() is not None:
            assert proc.returncode == 0, log.read_text()[-3000:]
            return None
        if kind == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=180)
            assert proc.returncode == 130, log.read_text()[-3000:]
        else:
            proc.kill()
            proc.wait(timeout=60)
        _, alive = psutil.wait_procs(processes_using(out), timeout=120)
        assert alive == [], f"left running after {kind}: {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
    return kind


def _steps_groups(out: Path) -> dict[int, list[int]]:
    """``{step: sorted prompt groups it trained}`` from the pool's delivery record."""
    from tests.e2e.test_train_run import pool_of

    ds = pool_of(out).to_xarray().compute(scheduler="synchronous")
    step, status, gid = ds["step"].values, ds["status"].values, ds["group_id"].values
    found: dict[int, set[int]] = {}
    for s, g in zip(step[status == 1].tolist(), gid[status == 1].tolist(), strict=True):
        found.setdefault(int(s), set()).add(int(g))
    return {s: sorted(g) for s, g in found.items()}


def test_bench_resume_chain(benchmark: Any, tmp_path: Path) -> None:
    base = tmp_path / "uninterrupted"
    start = time.perf_counter()
    done = _launch.run(
        _command(base), env=subprocess_env(), capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    base_s = time.perf_counter() - start

    out, log = tmp_path / "chain", tmp_path / "chain.console.log"
    rng = random.Random(SEED)

    def chain() -> list[str]:
        stops: list[str] = []
        while len(stops) < RESUMES:
            kind = _stop_once(out, rng, log)
            if kind is None:
                break
            stops.append(kind)
        final = _launch.run(
            _command(out), env=subprocess_env(), capture_output=True, text=True, timeout=1800
        )
        assert final.returncode == 0, final.stderr[-3000:]
        return stops

    stops = benchmark.pedantic(chain, rounds=1, iterations=1)
    assert len(stops) == RESUMES, f"the run finished after {len(stops)} stops"
    if RESUMES >= 2:
        assert set(stops) == {"ctrl-c", "kill -9"}, stops  # both kinds of stop

    # each step once, and every trajectory delivered once (the data order wraps past
    # its 210 prompts here, so it is checked against the uninterrupted run's below)
    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["version/trainer"] for r in rows] == list(range(1, STEPS + 1))
    pairs = delivered_pairs(out)
    assert len(pairs) == STEPS * 4 * 8 and len(set(pairs)) == len(pairs)
    record = group_record(out, STEPS)
    assert record["lost"] == [] and record["duplicated"] == 0, record
    assert [r["actor/lr"] for r in rows] == [r["actor/lr"] for r in train_rows(base)]
    assert _steps_groups(out) == _steps_groups(base)  # the data order, step by step
    benchmark.extra_info.update(
        {
            "resumes": len(stops),
            "ctrl_c": stops.count("ctrl-c"),
            "kill_9": stops.count("kill -9"),
            "steps": STEPS,
            "uninterrupted_s": base_s,
            "resumed_runs_in_log": (out / "logs" / "driver.log").read_text().count("resumed from"),
        }
    )
    print(json.dumps(benchmark.extra_info, indent=1))
