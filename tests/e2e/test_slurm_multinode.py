"""End-to-end on a real Slurm of 3 nodes on this machine (``build-support/slurm.sh
start --nodes 3``: each node a network namespace with its own address and slurmd).

The default recipe with ``cluster.type=slurm``: the driver (and its Dask scheduler,
on the bridge address) on this machine, 2 trainer ranks on 2 different nodes (DeepSpeed
data parallel over gloo between the namespaces), the embedded inference server on the
third node, rollout jobs on the nodes. The run trains, the reward is recorded, and
each step's weights reach the server on the other node: every trajectory of step
``s`` is tagged by the server with version ``s - 1`` (sync mode), and the last
reload left it on the trainer's last version.

A trainer rank's node cut off the network for 45 s (``slurm.sh partition``: its link
down, its processes untouched): the run stops once the scheduler has removed the node's
worker, with one line naming the rank, its job and node (one more run, ~2-3 min); with
``NEXRL_BENCH_LONG=1`` the same command resumes, each step and each group trained once.

In CI too (two more runs, ~4 min): a trainer rank's node is taken
down mid-run (``slurm.sh node-down``: its slurmd and every process in it killed, its
link down); the run stops with one line naming the node, and the same command
resumes on the two nodes left, each step and each group trained once.

Starts the 3-node Slurm itself (beside the one-node test Slurm, which keeps
running) and stops it at the end; skipped only where it cannot be started: not
root, or no ``ip`` (iproute2)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from math import isfinite
from pathlib import Path
from typing import Any

import pytest

from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests import _launch
from tests.e2e._groups import group_record
from tests.e2e._recipe import RECIPE, subprocess_env, train_rows
from tests.e2e.test_kill_and_resume import DEADLINE_S, assert_pool_record_matches, wait_for_step
from tests.e2e.test_train_run import pool_of
from tests.integration.slurm._slurm import SLURM_TOKEN, squeue, wait_gone

NODES = 3
STEPS = 4
SCRIPT = Path("build-support/slurm.sh")
BRIDGE = "10.77.0.1"  # this machine's address on the nodes' network (slurm.sh)
NODES_CONF = "/etc/slurm-nodes/slurm.conf"


def _script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return _launch.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def slurm_nodes() -> Iterator[None]:
    """The 3-node Slurm, started here unless it is up already (then left running)."""
    if os.geteuid() != 0:
        pytest.skip("the 3-node test Slurm needs root (network namespaces, slurmd): run as root")
    if shutil.which("ip") is None:
        pytest.skip("the 3-node test Slurm needs 'ip' (iproute2) to make its namespaces")
    started = False
    if _script("status", "--nodes").returncode != 0:
        res = _script("start", "--nodes", str(NODES))
        assert res.returncode == 0, (
            f"'{SCRIPT} start --nodes {NODES}' failed: {(res.stdout + res.stderr)[-3000:]}"
        )
        started = True
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", NODES_CONF)  # sbatch/squeue/scancel of the run and the test
        mp.setenv("NEXRL_TOKEN", SLURM_TOKEN)  # the documented command's api_key
        yield
    if started:
        _script("stop", "--nodes", timeout=300)


DOC = Path("docs/cluster.md")
# What the test adds to the documented command (docs/cluster.md, "Several nodes"), and
# nothing else: its run folder, steps and checkpoints, a private dashboard port, a
# faster health check.
TEST_ONLY = (
    "output_dir",
    "trainer.total_train_steps",
    "trainer.save_every",
    "cluster.dashboard_address",
    "runtime_monitor.health_check_interval_s",
    "cluster.slurm.inference.gpus",
)


def documented_command() -> tuple[str, dict[str, str]]:
    """The recipe and the ``key=value`` overrides of the 3-node command docs/cluster.md
    shows ("Tested on 3 nodes on one machine"), as a shell would pass them."""
    text = DOC.read_text()
    section = text[text.index("**Tested on 3 nodes on one machine.**") :]
    lines = section[section.index("./pants run src/python/nexrl:train -- ") :].splitlines()
    command = []
    for line in lines:
        command.append(line.strip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    words = shlex.split(" ".join(command))
    recipe, *overrides = words[words.index("--") + 1 :]
    return recipe, dict(o.split("=", 1) for o in overrides)


def multinode_overrides(
    out: Path, steps: int = STEPS, save_every: int = 0, inference_gpus: int = 1
) -> list[str]:
    """The documented command's overrides, with ``TEST_ONLY`` set by the test."""
    recipe, documented = documented_command()
    assert recipe == RECIPE, recipe
    assert documented["cluster.slurm.scheduler_host"] == BRIDGE, documented
    mine = {
        "output_dir": str(out),
        "trainer.total_train_steps": str(steps),
        "trainer.save_every": str(save_every),
        "cluster.dashboard_address": "127.0.0.1:0",
        "runtime_monitor.health_check_interval_s": "1",
        "cluster.slurm.inference.gpus": str(inference_gpus),
    }
    assert set(mine) == set(TEST_ONLY)
    return [f"{k}={v}" for k, v in {**documented, **mine}.items()]


def netns_of(pid: int) -> str | None:
    """The name of the network namespace ``pid`` lives in (None: this machine's own)."""
    ino = os.stat(f"/proc/{pid}/ns/net").st_ino
    for ns in Path("/run/netns").glob("*"):
        if ns.stat().st_ino == ino:
            return ns.name
    return None


def job_nodes() -> dict[str, str]:
    """``{job id: node}`` of the running jobs."""
    out = _launch.run(["squeue", "-h", "-o", "%i %N"], capture_output=True, text=True)
    return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)


def where(out: Path) -> dict[str, Any]:
    """Where each part runs, read while the run is going: cluster.json, squeue and
    each process's network namespace."""
    record = json.loads((out / "cluster.json").read_text())
    nodes = job_nodes()
    ranks = [
        {**r, "netns": netns_of(int(r["pid"])), "job_node": nodes.get(r["slurm_job_id"])}
        for r in record["trainer_ranks"]
    ]
    server = record["inference"]
    return {
        "record": record,
        "ranks": ranks,
        "server": {**server, "netns": netns_of(int(server["pid"]))},
        "rollout_nodes": {nodes.get(j) for j in record["rollout_workers"].values()},
    }


def test_the_default_recipe_trains_across_three_nodes(slurm_nodes: None, tmp_path: Path) -> None:
    out = tmp_path / "run"
    controller = Controller(load_recipe_checked(RECIPE, multinode_overrides(out)), progress=False)
    seen: dict[str, Any] = {}

    def look() -> None:
        wait_for_step(out, 1)
        seen.update(where(out))

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    result = controller.run()
    thread.join(timeout=30)
    assert result.steps == STEPS
    assert seen, "the run ended before its parts were located"

    # Each trainer rank in its own job on its own node, its process in that node's
    # namespace; the server on the third; rollout jobs on the nodes too.
    ranks, server = seen["ranks"], seen["server"]
    rank_nodes = [r["slurm_node"] for r in ranks]
    assert len(set(rank_nodes)) == 2, ranks
    for r in ranks:
        assert r["netns"] == r["slurm_node"] == r["job_node"], r
        assert r["address"].startswith("10.77.0."), r  # gloo and Dask on the nodes' network
    assert server["slurm_node"] not in rank_nodes, (server, ranks)
    assert server["netns"] == server["slurm_node"], server
    host = server["slurm_node"]
    assert server["base_url"].startswith("http://10.77.0."), server
    assert seen["rollout_nodes"] and seen["rollout_nodes"] <= {f"nexrl-n{i}" for i in (1, 2, 3)}
    assert seen["record"]["scheduler"].startswith(f"tcp://{BRIDGE}:"), seen["record"]

    rows = train_rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(isfinite(r["reward/mean"]) for r in rows), rows
    assert_pool_record_matches(out, rows)
    # Each step's weights reached the server on node `host`: it tagged every trajectory
    # of step s with version s-1 (sync: rollouts wait for each reload), and its last
    # reload (of the last step's snapshot) succeeded.
    ds = pool_of(out).to_xarray().compute(scheduler="synchronous")
    trained = ds["status"].values == 1
    tags = {
        int(s): sorted(
            {int(v) for v in ds["policy_version"].values[trained & (ds["step"].values == s)]}
        )
        for s in range(1, STEPS + 1)
    }
    assert tags == {s: [s - 1] for s in range(1, STEPS + 1)}, (host, tags)
    assert [r["version/inference"] for r in rows] == [r["version/trainer"] for r in rows]
    assert rows[-1]["version/inference"] == STEPS

    jobs = json.loads((out / "cluster.json").read_text())["slurm_jobs"]
    assert wait_gone([i for ids in jobs.values() for i in ids]) == {}
    assert squeue([]) == {}


def stop_and_resume(
    tmp_path: Path, fault: Callable[[str], Any], resume: bool = True
) -> tuple[str, str]:
    """A run of 8 steps (checkpoints every 2) on the 3 nodes; after step 3, ``fault(node)``
    on trainer rank 1's node. The run must stop (exit 1) with one ``error:`` line naming
    the node and how to resume, and no traceback; once ``fault``'s result (a process,
    if any) has ended, the same command resumes (with ``resume``) and trains each step
    and each group once. Returns the node and the error line."""
    out, steps = tmp_path / "run", 8
    # the server needs no GPU here: after the loss, 2 nodes hold the 2 ranks and it
    cmd = [
        sys.executable,
        "-m",
        "nexrl.driver.cli.train",
        RECIPE,
        *multinode_overrides(out, steps=steps, save_every=2, inference_gpus=0),
    ]
    first = _launch.Popen(
        cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pending = None
    try:
        wait_for_step(out, 3, first)  # checkpoint 2 written
        record = json.loads((out / "cluster.json").read_text())
        node = record["trainer_ranks"][1]["slurm_node"]
        pending = fault(node)
        _, err = first.communicate(timeout=DEADLINE_S)
    finally:
        if first.poll() is None:
            first.kill()
        if isinstance(pending, subprocess.Popen):  # the node back before the resume
            pending.terminate()  # slurm.sh's trap puts the link back up
            pending.communicate(timeout=DEADLINE_S)
    assert first.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    assert f"on node {node}" in errors[0] and "resume" in errors[0], errors[0]
    assert "Traceback" not in err, err[-3000:]
    if not resume:
        return node, errors[0]

    second = _launch.run(
        cmd, env=subprocess_env(), capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert second.returncode == 0, second.stderr[-3000:]
    record = json.loads((out / "cluster.json").read_text())
    assert len({r["slurm_node"] for r in record["trainer_ranks"]}) == 2, record
    assert [r["step"] for r in train_rows(out)] == list(range(1, steps + 1))
    groups = group_record(out, steps)
    assert groups["lost"] == [] and groups["duplicated"] == 0, groups
    assert len(groups["trained"]) == steps * 4
    return node, errors[0]


# past Dask's comm timeout (distributed.comm.timeouts.tcp, 30 s). The scheduler removed the
# node's worker 23-57 s after the link went down, or (in CI, loaded) only once it was back,
# even after 90 s: the gloo error of the other rank then comes first, and the call waits
# for the scheduler's word to name the rank (nexrl.trainer.pending.LOST_PEER_WAIT_S)
PARTITION_S = 45


def test_a_trainer_node_cut_off_the_network_stops_the_run_naming_it_and_it_resumes(
    slurm_nodes: None, tmp_path: Path
) -> None:
    """``slurm.sh partition``: rank 1's node loses its link for PARTITION_S, its processes
    untouched. The scheduler removes the node's workers once Dask's comm timeout passes
    (or, loaded, once the link is back); the run stops then, without waiting for gloo's
    timeout, naming the rank, its job and node, not the other rank's gloo error. With ``NEXRL_BENCH_LONG=1`` (one more run, ~2 min): the same
    command resumes once the node is back, each step and group once (the resume itself
    is the node-down test's)."""

    def partition(node: str) -> subprocess.Popen[str]:
        return _launch.Popen(
            ["bash", str(SCRIPT), "partition", node, str(PARTITION_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    long = os.environ.get("NEXRL_BENCH_LONG") == "1"
    node, error = stop_and_resume(tmp_path, partition, resume=long)
    assert "rank 1 (Slurm job" in error and "left the Dask scheduler" in error, error
    # Slurm took the node for dead (SlurmdTimeout=30 s) and brings it back only minutes
    # after it answers again; the tests after this one want their 3 nodes now
    _launch.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)


def test_a_node_taken_down_stops_the_run_naming_it_and_it_resumes_on_the_others(
    slurm_nodes: None, tmp_path: Path
) -> None:
    def down(node: str) -> None:
        res = _script("node-down", node, timeout=120)
        assert res.returncode == 0, res.stderr

    node, _ = stop_and_resume(tmp_path, down)
    record = json.loads((tmp_path / "run" / "cluster.json").read_text())
    assert node not in {r["slurm_node"] for r in record["trainer_ranks"]}, record
