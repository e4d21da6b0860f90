"""The CPU a command and every process under it use, and its wall time.

    python -m bench.process_cpu [--repeat N] -- COMMAND [ARG ...]

Samples every process under the command (``psutil``, every 50 ms) and keeps each one's
last user + system time, so processes that a parent forks and never waits for (a
warm parent's workers, the embedded server) are counted too; a process shorter than
one sample is missed. Prints one line per run (wall, total CPU) and the processes
that used the most, by command line. The command's own output goes to /dev/null.
Used for docs/benchmarks.md, "Start-up: a warm parent".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil

__all__ = ["main", "measure"]


Seen = dict[int, tuple[float, str]]


def measure(command: list[str], interval_s: float = 0.05) -> tuple[float, Seen]:
    """Run ``command`` to its end; (wall seconds, {pid: (cpu seconds, role)}), the role
    ``command``, ``child`` (of it) or ``grandchild`` (and below)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    seen: Seen = {}
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                with p.oneshot():
                    times = p.cpu_times()
                    role = (
                        "command"
                        if p.pid == root.pid
                        else ("child" if p.ppid() == root.pid else "grandchild")
                    )
            except psutil.Error:
                continue
            seen[p.pid] = (times.user + times.system, role)
        time.sleep(interval_s)
    return time.monotonic() - t0, seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.process_cpu", description=__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="runs, one line each")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("the command to measure is required: -- COMMAND [ARG ...]")
    for i in range(args.repeat):
        wall, seen = measure(command)
        total = sum(cpu for cpu, _ in seen.values())
        top = sorted(seen.items(), key=lambda kv: -kv[1][0])[:6]
        parts = ", ".join(f"{role} {cpu:.1f} s" for _, (cpu, role) in top)
        print(f"run {i + 1}: wall {wall:.1f} s, CPU {total:.1f} s ({parts})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
