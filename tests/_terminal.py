"""Run a command on a real pseudo-terminal (what a user's terminal is) and read all
it wrote: the progress-bar tests of the unit and e2e tiers."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios


def run_on_a_terminal(
    cmd: list[str], env: dict[str, str], *, rows: int = 40, columns: int = 200
) -> tuple[int, str]:
    """``cmd`` with stdin/stdout/stderr on a new pseudo-terminal of ``rows`` x
    ``columns`` (0 x 0: a terminal that reports no size); its exit code and output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    child = subprocess.Popen(cmd, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # every process holding the terminal has closed it
            break
        if not data:
            break
        out += data
    os.close(leader)
    return child.wait(timeout=60), out.decode(errors="replace")
