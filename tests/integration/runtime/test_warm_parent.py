"""A local run's workers and embedded server fork from the warm parent.

``nexrl.core.process.forkserver``: a driver script (its own process, so that it can be
killed) starts the warm parent, a real ``LocalCluster`` through ``start_cluster``
and the embedded server through ``EmbeddedServer`` on a tiny model, and reports
what each process has; the test then talks to the server with the real ``openai``
client and kills the driver with SIGKILL: nothing it started may outlive it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import psutil
import pytest

# what the driver script (a string) imports, for dependency inference
import backends.inference.embedded  # noqa: F401
import nexrl.driver.cluster.cluster  # noqa: F401
from nexrl.core.process.forkserver import PRELOAD
from nexrl.driver.cli.train import main

DRIVER = r"""
import json, os, sys, time
from nexrl.driver.cli.train import warm_parent_for
from nexrl.core.process.forkserver import PRELOAD
from nexrl.core.config.sections.cluster import ClusterConfig

def what_i_have():
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "preloaded": [m for m in PRELOAD if m in sys.modules],
        "malloc_var": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
        "set_later": os.environ.get("NEXRL_TEST_SET_LATER"),
    }

if __name__ == "__main__":  # a worker imports this file again (as spawn does)
    # what `nexrl train RECIPE OVERRIDES...` does first
    warm = warm_parent_for("recipes/max_digit/max_digit_tiny.yaml", sys.argv[3:])
    from nexrl.driver.cluster.cluster import start_cluster
    from backends.inference.embedded import EmbeddedServer

    os.environ["NEXRL_TEST_SET_LATER"] = "yes"  # after the warm parent started
    handle = start_cluster(ClusterConfig(n_workers=2, dashboard_address="127.0.0.1:0"), "t")
    workers = list(handle.client.run(what_i_have).values())
    server = EmbeddedServer(sys.argv[1], log_path=sys.argv[2]).start()
    try:  # a server that cannot start says why, forked or spawned
        EmbeddedServer(sys.argv[1] + "-missing", startup_timeout_s=60).start()
        refused = None
    except Exception as exc:
        refused = str(exc)
    print(json.dumps({
        "warm": warm, "driver": os.getpid(), "workers": workers,
        "server": server.pid, "url": server.openai_base_url, "refused": refused,
    }), flush=True)
    time.sleep(600)
"""


def ppid_of(pid: int) -> int:
    return psutil.Process(pid).ppid()


def start_driver(
    model: Path, tmp_path: Path, *overrides: str
) -> tuple[subprocess.Popen[str], dict]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(model), str(tmp_path / "inference.log"), *overrides],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=60)
        pytest.fail(f"the driver script exited with {proc.returncode} before reporting")
    return proc, json.loads(line)


def test_workers_and_server_fork_from_the_warm_parent_and_die_with_the_driver(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    proc, seen = start_driver(tiny_model_dir, tmp_path)
    try:
        assert seen["warm"] is True
        parents = {w["ppid"] for w in seen["workers"]}
        assert len(parents) == 1, seen["workers"]  # one warm parent for both workers
        warm = parents.pop()
        started = [psutil.Process(p) for p in (warm, seen["server"])]
        started += [psutil.Process(w["pid"]) for w in seen["workers"]]
        assert warm != seen["driver"]
        assert ppid_of(warm) == seen["driver"]
        # forked from the driver once it had imported what both need (not started fresh)
        assert psutil.Process(warm).cmdline() == psutil.Process(seen["driver"]).cmdline()
        assert ppid_of(seen["server"]) == warm
        for worker in seen["workers"]:
            # torch and transformers were imported before the worker existed
            assert worker["preloaded"] == list(PRELOAD)
            # what Dask's nanny gives a spawned worker, with nexrl's change
            assert worker["malloc_var"] is None
            assert worker["hash_seed"] == "6640"
            # what the driver set after the warm parent had started, as spawned
            assert worker["set_later"] == "yes"
        client = openai.OpenAI(base_url=seen["url"], api_key="x", max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=str(tiny_model_dir),
            messages=[{"role": "user", "content": "max 1 2 3"}],
            max_tokens=3,
        )
        assert reply.choices[0].message.content is not None
        assert "Traceback" not in (tmp_path / "inference.log").read_text()
        # the server's own one-line refusal, from its log, and its exit code
        assert "server exited with 1" in seen["refused"]
        assert "is not a model directory" in seen["refused"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    _, alive = psutil.wait_procs(started, timeout=60)
    assert alive == []


@pytest.mark.parametrize("override", ["cluster.warm_parent=false", "cluster.type=address"])
def test_turned_off_or_not_local_every_process_is_spawned_fresh(
    override: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    proc, seen = start_driver(tiny_model_dir, tmp_path, override)
    try:
        assert seen["warm"] is False
        for worker in seen["workers"]:
            assert worker["ppid"] == seen["driver"]  # the nanny, in the driver, spawned it
            assert "transformers.modeling_utils" not in worker["preloaded"]
        assert ppid_of(seen["server"]) == seen["driver"]
        assert "is not a model directory" in seen["refused"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def forkservers() -> list[psutil.Process]:
    """This process's live children that run a ``multiprocessing`` forkserver: started
    fresh (``-c 'from multiprocessing.forkserver import main'``) or forked from this
    process (the same command line as this one: found by the pid Python records)."""
    from multiprocessing import forkserver

    forked = getattr(forkserver._forkserver, "_forkserver_pid", None)
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if child.pid == forked or "multiprocessing.forkserver" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_a_recipe_that_fails_its_check_leaves_no_warm_parent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nexrl.core.process.forkserver import warm_context

    assert forkservers() == []
    code = main(["recipes/max_digit/max_digit_tiny.yaml", "trainer.lr=-1"])
    assert code == 2
    assert "trainer.lr" in capsys.readouterr().err
    assert warm_context() is None
    assert forkservers() == []


def test_a_recipe_without_a_cluster_section_gets_the_warm_parent(tmp_path: Path) -> None:
    """The schema's defaults (a local cluster, ``warm_parent`` on) hold for a recipe that
    never names ``cluster``, as a new task's recipe often does."""
    from nexrl.driver.cli.train import stop_warm_parent, warm_parent_for

    recipe = tmp_path / "r.yaml"
    recipe.write_text("defaults: [nexrl_base, _self_]\nexperiment_name: no_cluster_section\n")
    assert forkservers() == []
    try:
        assert warm_parent_for(str(recipe), []) is True
        assert len(forkservers()) == 1
    finally:
        stop_warm_parent()
    assert warm_parent_for(str(recipe), ["cluster.warm_parent=false"]) is False
    assert forkservers() == []


LOST = r"""
import os, signal, time
from nexrl.core.process.forkserver import start_warm_parent, warm_parent_lost
from multiprocessing import forkserver

if __name__ == "__main__":
    assert start_warm_parent(preload=("json",))
    print(repr(warm_parent_lost()), flush=True)  # alive: nothing to say
    pid = forkserver._forkserver._forkserver_pid
    os.kill(pid, signal.SIGKILL)  # as the out-of-memory killer would
    deadline = time.monotonic() + 30
    while not warm_parent_lost() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(pid, flush=True)
    print(warm_parent_lost(), flush=True)
"""


def test_a_warm_parent_that_died_is_named_in_the_runs_error(tmp_path: Path) -> None:
    """A killed warm parent takes the workers and the server forked from it along; the
    run's error line then says so (``warm_parent_lost``), not only the rank it lost."""
    script = tmp_path / "lost.py"
    script.write_text(LOST)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    alive, pid, said = done.stdout.splitlines()
    assert alive == "''"
    assert said == (
        f"; the warm parent (pid {pid}) that this run's local workers and inference server "
        "fork from had died (killed? out of memory?) and took them with it "
        "(cluster.warm_parent=false starts each process on its own)"
    )
