"""``./pants run``: a SIGINT or SIGTERM sent to the command's pid stops the program as
Ctrl-C does (Pants gets one SIGINT and passes it on), and the command exits 130; a
Ctrl-C at a terminal reaches Pants once, not twice (a second SIGINT stops a run at
once, without its checkpoint).

The real ``./pants`` script runs with a bootstrapped Pants in place; only Pants itself
is a stand-in (a ``pants`` module that records the signals it gets and exits 1 on
SIGINT, as Pants does after passing it on): a real Pants run inside this test's own
Pants sandbox would take minutes. What nexrl's driver does on that SIGINT (checkpoint,
exit 130) is tested in tests/e2e/test_kill_and_resume.py."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path.cwd()

STANDIN_PANTS = """
import os, signal, sys, time
log = os.environ["STANDIN_PANTS_LOG"]
def record(line):
    with open(log, "a") as f:
        f.write(line + "\\n")
def on_signal(sig, _frame):
    record(signal.Signals(sig).name)
    time.sleep(0.5)  # a second SIGINT passed on would arrive meanwhile
    sys.exit(1)  # Pants, after passing the SIGINT to the program: "Interrupted by user."
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
record("started " + " ".join(sys.argv[1:]))
if sys.argv[-1] == "exit3":
    sys.exit(3)
time.sleep(60)
record("not stopped")
"""


def _machine(tmp_path: Path) -> dict[str, str]:
    """A HOME where ``./pants`` finds itself bootstrapped (its venv's python, the pex CLI)
    and the stand-in Pants on PYTHONPATH."""
    cache = tmp_path / "home" / ".cache" / "nexrl-pants"
    venv_bin = cache / "pants-2.17.1" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    for name in ("pex-v2.1.137", "pex-v2.1.137.known"):
        (cache / name).write_text("")
    (tmp_path / "standin" / "pants").mkdir(parents=True)
    (tmp_path / "standin" / "pants" / "__main__.py").write_text(STANDIN_PANTS)
    return {
        "HOME": str(tmp_path / "home"),
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(tmp_path / "standin"),
        "STANDIN_PANTS_LOG": str(tmp_path / "pants.log"),
        "PANTS_CONCURRENT": "true",
    }


def _log(tmp_path: Path, until: str) -> list[str]:
    deadline = time.monotonic() + 30
    path = tmp_path / "pants.log"
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if any(line.startswith(until) for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"the stand-in Pants never logged {until!r}")


COMMAND = ["bash", "./pants", "run", "src/python/nexrl:train", "--", "recipe.yaml"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_commands_pid_stops_the_run_as_ctrl_c_does(
    tmp_path: Path, sig: signal.Signals
) -> None:
    command = subprocess.Popen(COMMAND, env=_machine(tmp_path), cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        started = _log(tmp_path, "started")
        assert started == ["started run src/python/nexrl:train -- recipe.yaml"]
        command.send_signal(sig)  # the pid a supervisor or a batch system holds
        assert command.wait(timeout=30) == 130
    finally:
        command.kill()
    assert (tmp_path / "pants.log").read_text().splitlines()[1:] == ["SIGINT"]


def test_ctrl_c_at_a_terminal_reaches_pants_once(tmp_path: Path) -> None:
    leader, follower = pty.openpty()

    def own_terminal() -> None:  # a session whose controlling terminal is the pty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    command = subprocess.Popen(
        COMMAND,
        env=_machine(tmp_path),
        cwd=ROOT,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        preexec_fn=own_terminal,
    )
    os.close(follower)
    try:
        _log(tmp_path, "started")
        os.write(leader, b"\x03")  # Ctrl-C: the terminal signals its foreground group
        assert command.wait(timeout=30) == 130
    finally:
        command.kill()
        os.close(leader)
    assert (tmp_path / "pants.log").read_text().splitlines()[1:] == ["SIGINT"]


def test_a_signal_to_the_commands_process_group_reaches_pants_once(tmp_path: Path) -> None:
    """``kill -INT -PGID`` with no terminal (a supervisor, a batch system): Pants gets it
    once, through ``./pants`` (in a process group of its own there; a second SIGINT
    made real Pants stop relaying the run's last lines), and the command exits 130."""
    command = subprocess.Popen(
        COMMAND, env=_machine(tmp_path), cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _log(tmp_path, "started")
        os.killpg(command.pid, signal.SIGINT)
        assert command.wait(timeout=30) == 130
    finally:
        command.kill()
    assert (tmp_path / "pants.log").read_text().splitlines()[1:] == ["SIGINT"]


def test_without_a_signal_the_command_exits_with_pants_code(tmp_path: Path) -> None:
    env = _machine(tmp_path)
    done = subprocess.run(["bash", "./pants", "run", "x", "exit3"], env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 3
    # another goal: Pants itself, its own code on a signal (no launcher in between)
    other = subprocess.Popen(["bash", "./pants", "test", "::"], env=env, cwd=ROOT)
    try:
        _log(tmp_path, "started test")
        other.send_signal(signal.SIGINT)
        assert other.wait(timeout=30) == 1
    finally:
        other.kill()
