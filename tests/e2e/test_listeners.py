"""A local run of the default recipe, with its default addresses, listens on loopback
only: every listening TCP socket of the driver and of every process under it (the Dask
scheduler and dashboard, the workers, the trainer rank's rendezvous store and gloo,
the embedded inference server), read from the kernel (psutil, ``/proc/net``) while
the run trains. An address given beyond loopback is said in one line."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests import _launch
from tests.e2e._recipe import RECIPE, overrides, subprocess_env
from tests.e2e.test_kill_and_resume import wait_for_step


def listeners(root: int) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, command) of every listening TCP socket of ``root`` and of
    every process under it."""
    procs = [psutil.Process(root)]
    procs += procs[0].children(recursive=True)
    found = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
            name = " ".join(p.cmdline())[:160]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                found.append((c.laddr.ip, c.laddr.port, p.pid, name))
    return found


def test_a_local_run_listens_on_loopback_only(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # the shared overrides minus the dashboard's: the default address is the one checked
    args = [a for a in overrides(out, steps=40) if not a.startswith("cluster.dashboard")]
    proc = _launch.Popen(
        [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE, *args],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_step(out, 2, proc)  # the trainer, the server and the rollouts are up
        found = listeners(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert len({pid for _, _, pid, _ in found}) >= 3, found  # driver, workers, server
    beyond = [f for f in found if not ipaddress.ip_address(f[0]).is_loopback]
    assert beyond == [], beyond
    assert "listens beyond loopback" not in err, err[-3000:]
